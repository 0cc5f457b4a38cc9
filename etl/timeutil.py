"""Time in one representation: integer epoch milliseconds, UTC, half-open intervals [start, end)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

# A time as a caller gives one: an aware datetime, epoch milliseconds (or, where a person writes it,
# `parse_time`'s epoch numbers), or ISO 8601 text with an offset.
Time = datetime | int | str


def to_ms(value: datetime | int | float | str) -> int:
    """Epoch ms from an aware datetime, an ISO 8601 string with an offset, or epoch ms."""
    if isinstance(value, bool):
        raise TypeError("a time cannot be a boolean")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(iso_text(value).replace("Z", "+00:00").replace("z", "+00:00"))
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"time {value.isoformat()} has no UTC offset; write it as ...Z or ...+00:00")
        return int(value.timestamp() * 1000)
    raise TypeError(f"cannot read a time from {type(value).__name__}")


_ISO_DATE = re.compile(r"^\d{4}-\d\d-\d\d(?:[Tt ]|$)")  # ISO 8601's date first: 2026-11-25...
_OFFSET = re.compile(r"(?:[Zz]|[+-]\d\d(?::?\d\d)?)$")


def iso_text(text: str, offset: bool = False) -> str:
    """`text` stripped, if it is written as ISO 8601 (and ends with a UTC offset, when `offset`); else a
    ValueError that says which of the two is wrong (a format problem is not a missing offset)."""
    text = text.strip()
    if not _ISO_DATE.match(text):
        raise ValueError(f"{text!r} is not an ISO 8601 time: write it like 2026-11-01T00:00:00Z")
    if offset and not _OFFSET.search(text[10:]):  # after the date: 2026-11-25 ends in no offset
        try:  # a month 13 is the problem to name, not the offset it also lacks
            datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"{text!r} is not a valid time: {exc}") from None
        raise ValueError("needs a UTC offset, e.g. 2026-11-01T00:00:00Z")
    return text


# Epoch numbers a person gives, told apart by their count of digits: seconds, milliseconds and
# microseconds of 1973..2286 have 9-10, 12-13 and 15-16 digits; any other count could be two of them
# (or a typo) and needs its unit written out.
_EPOCH_UNITS = {9: "s", 10: "s", 12: "ms", 13: "ms", 15: "us", 16: "us"}
_EPOCH = re.compile(r"^([+-]?\d+)\s*(s|ms|us|µs)?$")


def parse_time(value: Time) -> int:
    """Epoch ms from a time a person wrote: ISO 8601 with a UTC offset, an aware datetime, or an epoch
    number, in seconds, milliseconds or microseconds told apart by size (`1793491200`, `1793491200000`),
    or with its unit (`1793491200s`, `1793491200000ms`, `...us`). ValueError when it cannot be sure."""
    if isinstance(value, bool):
        raise ValueError("a time cannot be a boolean")
    if isinstance(value, int):
        return _epoch(value, None)
    if isinstance(value, str) and (match := _EPOCH.match(value.strip())):
        return _epoch(int(match.group(1)), match.group(2))
    try:
        return to_ms(value)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def _epoch(number: int, unit: str | None) -> int:
    if unit is None:
        unit = _EPOCH_UNITS.get(len(str(abs(number)))) if number > 0 else None
        if unit is None:
            raise ValueError(
                f"cannot tell the unit of the epoch number {number}: write it with one "
                "(1793491200s, 1793491200000ms, 1793491200000000us) or as ISO 8601 with an offset"
            )
    return number * 1000 if unit == "s" else number if unit == "ms" else number // 1000


def ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def iso(ms: int) -> str:
    return ms_to_datetime(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    return int(datetime.now(tz=UTC).timestamp() * 1000)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")
_UNIT_MS = {"ms": 1, "s": SECOND_MS, "m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS, "w": 7 * DAY_MS}


def parse_duration_ms(value: str | int | float | timedelta) -> int:
    """'90s', '30m', '1h', '7d', a timedelta, or a number of seconds."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 1000)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration like 30s, 15m, 1h or 7d")
    return int(float(match.group(1)) * _UNIT_MS[match.group(2)])


# The canonical wire form "YYYY-MM-DDTHH:MM:SS.mmmZ" is 24 characters; parsing it digit by digit
# with numpy is a few array passes instead of pandas' general ISO parser, which stays the fallback for
# anything else.
CANONICAL_LEN = 24
_TEMPLATE = b"0000-00-00T00:00:00.000Z"
# Subtracting the template leaves each digit's value and zero at each separator; any other byte
# lands above its column's limit (uint8 arithmetic wraps below zero).
_BASE = np.frombuffer(_TEMPLATE, np.uint8)
_LIMIT = np.array([9 if c == "0" else 0 for c in _TEMPLATE.decode()], np.uint8)
# Per year 0..9999: leap or not, and days from 1970-01-01 to its January 1st (proleptic Gregorian).
_YEARS = np.arange(10_000)
_LEAP = (_YEARS % 4 == 0) & ((_YEARS % 100 != 0) | (_YEARS % 400 == 0))
_YEAR_START = np.concatenate(([0], np.cumsum(365 + _LEAP)))[:-1] - 719_528  # 0000-01-01 .. 1970-01-01
_MONTH_START = np.array([0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365])  # non-leap
_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0])


def canonical_ms(a: np.ndarray) -> np.ndarray | None:
    """Epoch ms of an (n, 24) uint8 array of canonical stamps; None unless every row is a valid one."""
    d = a - _BASE
    if not (d <= _LIMIT).all():
        return None
    month, day, hour, minute, second = (d[:, 5:18:3] * 10 + d[:, 6:19:3]).T  # each at most 99: uint8
    year = d[:, :4].astype(np.int64) @ np.array([1000, 100, 10, 1])
    milli = d[:, 20:23].astype(np.int64) @ np.array([100, 10, 1])
    month = np.minimum(month, 13)  # 13 is no month: its length is 0
    leap = _LEAP[year]
    if not (
        (day >= 1)
        & (day <= _MONTH_DAYS[month] + (leap & (month == 2)))
        & (hour <= 23)
        & (minute <= 59)
        & (second <= 59)
    ).all():
        return None  # impossible dates: the slow parser names them
    days = _YEAR_START[year] + _MONTH_START[month] + (leap & (month > 2)) + day - 1
    seconds = (hour.astype(np.int64) * 60 + minute) * 60 + second
    ms: np.ndarray = (days * 86_400 + seconds) * SECOND_MS + milli
    return ms


def parse_iso_ms(stamps: list[Any]) -> np.ndarray:
    """Epoch ms (int64) for ISO 8601 strings or epoch-ms numbers; ValueError if any is unreadable."""
    n = len(stamps)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    try:
        joined = "".join(stamps).encode("ascii")
    except (TypeError, UnicodeEncodeError):
        joined = b""
    if len(joined) == CANONICAL_LEN * n:
        parsed = canonical_ms(np.frombuffer(joined, dtype=np.uint8).reshape(n, CANONICAL_LEN))
        if parsed is not None:
            return parsed
    return _parse_slow(stamps)


def _parse_slow(stamps: list[Any]) -> np.ndarray:
    if all(isinstance(s, int | float) and not isinstance(s, bool) for s in stamps):
        # As floats first: an integer beyond 64 bits must not wrap round (nor a float be cast blindly).
        as_float = np.asarray(stamps, dtype=np.float64)
        if not (np.abs(as_float) < 2.0**63).all():
            raise ValueError("a stamp in the answer is beyond 64-bit epoch milliseconds")
        return np.asarray(stamps, dtype=np.int64)
    import pandas as pd  # imported here so that commands which never meet an odd stamp start faster

    try:
        parsed = pd.to_datetime(pd.Series(stamps, dtype=object), format="ISO8601", utc=True)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"unreadable timestamp in answer: {str(exc)[:120]}") from None
    if parsed.isna().any():
        raise ValueError("missing timestamp in answer")
    return parsed.dt.as_unit("ms").astype("int64").to_numpy()


def duration_text(seconds: float | None) -> str:
    """A span for people: 45s, 12m, 3h 05m, 2d 4h ("" for None)."""
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, _ = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"
