"""Fast JSON for series answers.

A point is one fixed-width record, `{"timestmp":"<date>T<time>.<ms>Z","value":<number>},`, assembled
from lookup tables with numpy; numbers are right-aligned with spaces (JSON whitespace) to the widest
integer part of the answer, so nothing has to be squeezed out afterwards.
"""

from __future__ import annotations

import datetime
import functools

import numpy as np
import orjson

from etl_emulator.dataset import DAY_MS


def _digits(width: int) -> np.ndarray:
    """(10**width, width) uint8: the zero-padded ASCII digits of 0..10**width-1."""
    return (np.arange(10**width)[:, None] // 10 ** np.arange(width - 1, -1, -1) % 10 + 48).astype(np.uint8)


def _time_table() -> np.ndarray:
    """ "THH:MM:SS." for every second of a day."""
    s = np.arange(86400)
    d2 = _digits(2)

    def col(c: str) -> np.ndarray:
        return np.full((86400, 1), ord(c), np.uint8)

    parts = [col("T"), d2[s // 3600], col(":"), d2[s // 60 % 60], col(":"), d2[s % 60], col(".")]
    return np.ascontiguousarray(np.concatenate(parts, axis=1)).view("S10").ravel()


def _number_tables(width: int) -> np.ndarray:
    """S(width+2) "  -12." for the integer parts 0..10**width-1, then the same negated."""
    digits = _digits(width)
    lead = (np.arange(10**width)[:, None] < 10 ** np.arange(width - 1, -1, -1)) & (
        np.arange(width) < width - 1
    )
    digits[lead] = 32
    first = np.argmin(lead, axis=1)  # column of the first digit
    pos = np.concatenate(
        [np.full((10**width, 1), 32, np.uint8), digits, np.full((10**width, 1), 46, np.uint8)], 1
    )
    neg = pos.copy()
    neg[np.arange(10**width), first] = 45  # '-' right before the first digit
    return np.ascontiguousarray(np.concatenate([pos, neg])).view(f"S{width + 2}").ravel()


_TIME = _time_table()
_MS = (
    np.ascontiguousarray(
        np.concatenate([_digits(3), np.tile(np.frombuffer(b'Z","value":', np.uint8), (1000, 1))], axis=1)
    )
    .view("S14")
    .ravel()
)
_INT = {w: _number_tables(w) for w in (1, 2, 3, 4)}
_FRAC = (
    np.ascontiguousarray(
        np.concatenate([_digits(3), np.tile(np.frombuffer(b"},", np.uint8), (1000, 1))], axis=1)
    )
    .view("S5")
    .ravel()
)


@functools.lru_cache(maxsize=65536)
def _date(day: int) -> bytes:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat().encode()


def _stamp_parts(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point: "YYYY-MM-DD", "THH:MM:SS.", "mmmZ\",\"value\":" (years 1..9999)."""
    days = ts // DAY_MS
    ms_of_day = ts - days * DAY_MS
    seconds = ms_of_day // 1000
    first = int(days.min())
    dates = np.array([_date(d) for d in range(first, int(days.max()) + 1)], "S10")
    return dates.take(days - first), _TIME.take(seconds), _MS.take(ms_of_day - seconds * 1000)


def iso_strings(ts: np.ndarray) -> list[str]:
    """ISO 8601 UTC strings with milliseconds of epoch ms."""
    if not len(ts):
        return []
    rows = np.empty(len(ts), [("date", "S10"), ("time", "S10"), ("ms", "S3")])
    rows["date"], rows["time"], ms = _stamp_parts(ts)
    rows["ms"] = ms.astype("S3")
    return [s + "Z" for s in rows.view("S23").astype(str).tolist()]


def encode_points(param_id: int, ts: np.ndarray, values: np.ndarray) -> bytes:
    """`{"id": .., "points": [{"timestmp": ISO, "value": v}, ..]}`, built column-wise with numpy for
    values with at most 3 decimals and |v| < 10000; anything else goes through orjson."""
    head = b'{"id":%d,"points":[' % param_id
    if not len(ts):
        return head + b"]}"
    milli = np.rint(values * 1000)
    top = np.abs(milli).max()
    if not (top < 1e7 and (milli / 1000 == values).all()):  # also false for NaN
        points = [{"timestmp": s, "value": v} for s, v in zip(iso_strings(ts), values.tolist(), strict=True)]
        return orjson.dumps({"id": param_id, "points": points})
    width = len(str(int(top) // 1000))
    milli = milli.astype(np.int64)
    magnitude = np.abs(milli)
    whole = magnitude // 1000
    rows = np.empty(
        len(ts),
        [
            ("head", "S13"),
            ("date", "S10"),
            ("time", "S10"),
            ("ms", "S14"),
            ("int", f"S{width + 2}"),
            ("frac", "S5"),
        ],
    )
    rows["head"] = b'{"timestmp":"'
    rows["date"], rows["time"], rows["ms"] = _stamp_parts(ts)
    rows["int"] = _INT[width].take(whole + (milli < 0) * 10**width)
    rows["frac"] = _FRAC.take(magnitude - whole * 1000)
    return b"".join((head, rows.view(np.uint8)[:-1].data, b"]}"))


def encode_candles(
    param_id: int, b: np.ndarray, o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray
) -> bytes:
    """`{"id": .., "candles": [{"timestmp": epoch ms, "open", "close", "low", "high"}, ..]}`."""
    keys = ("timestmp", "open", "close", "low", "high")
    rows = [
        dict(zip(keys, row, strict=True))
        for row in zip(b.tolist(), o.tolist(), c.tolist(), lo.tolist(), h.tolist(), strict=True)
    ]
    return orjson.dumps({"id": param_id, "candles": rows})
