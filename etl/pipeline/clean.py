"""Answers to typed Arrow tables: window-clipped, NaN-free, deduplicated on (param_id, ts), sorted.

The platform's intervals are inclusive, ours half-open: `keep_span` drops the point at a window's end,
which is expected there and not counted as odd.

A point outside the window asked for is the server's fault. A stamp that reads as a time orders of
magnitude away from its window (epoch seconds read as milliseconds fall in January 1970) says alone that
the server writes time in another unit; stamps that mostly fall outside their window, or pile up on a
few instants, say it for a longer answer; every stamp a UTC midnight, two or more of them outside, or
three or more values piled on one instant, half the answer, say "dates without a time". Then the window
fails (`TimeFormatError`) rather than being written as nothing or as a handful of points, and
checkpointed. A point just outside its window (a server's slack) is dropped and counted as
`points_outside_window`. Of several points at one stamp the first sent is kept; repeats of the same
values are counted as `duplicate_points`, repeats with other values as `conflicting_duplicates`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.client.models import Candles, Points
from etl.errors import DataError
from etl.model import SCHEMAS, TS, Series, Window, keep_span
from etl.pipeline.counts import Counts
from etl.timeutil import DAY_MS, iso

__all__ = ["SCHEMAS", "TS", "TimeFormatError", "WindowData", "clean", "to_table"]

# An answer this long or longer whose stamps are more than half outside its window, or more than half
# repeats piled up on few instants, is read in the wrong time format. A shorter one is judged by what each
# stamp says alone (`MAGNITUDE`), and by the points of other values piled on one instant (`PILED`).
JUDGED_FROM = 8
COLLAPSED = 16  # points on one instant that no duplication explains
# Points of different values on one instant, half the answer or more: a server that sends a point twice
# sends the same value, and sends its conflicting duplicates one at a time, not piled up.
PILED = 3
# A stamp below the window's start divided by this, or above its end times this, is in another unit
# (seconds, microseconds): no server's slack reaches that far.
MAGNITUDE = 10


class TimeFormatError(DataError):
    """The answer's stamps, read as the document says, do not fit its window."""


@dataclass(slots=True)
class WindowData:
    """The clean columns of one window."""

    window: Window
    ts: np.ndarray
    values: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.ts)

    def covers(self, window: Window) -> bool:
        """Whether this answer holds all of `window`'s points (same parameter and series, wider span)."""
        mine = self.window
        return (mine.param_id, mine.series) == (window.param_id, window.series) and (
            mine.start <= window.start and window.end <= mine.end
        )

    def within(self, window: Window) -> WindowData:
        """The part of this answer in `window` (which it covers): what asking for the window would give."""
        lo, hi = keep_span(self.ts, window.start, window.end)
        return WindowData(window, self.ts[lo:hi], {c: v[lo:hi] for c, v in self.values.items()})


def clean(window: Window, data: Points | Candles, counts: Counts) -> WindowData:
    """Keep points inside [start, end), with every value present and finite, once per timestamp (first
    kept)."""
    ts = data.ts
    if len(ts) < 2 or (np.diff(ts) > 0).all():  # the usual answer: ascending, one point per stamp
        lo, hi = keep_span(ts, window.start, window.end)
        values = {c: getattr(data, c)[lo:hi] for c in window.series.value_columns}
        if all(np.isfinite(v).all() for v in values.values()):
            outside = lo + len(ts) - hi - int(hi < len(ts) and ts[hi] == window.end)
            if outside:
                check_outside(window, ts, outside)
                counts.points_outside_window += outside
            return WindowData(window, ts[lo:hi], values)
    return _clean_any(window, data, counts)


def _when(ms: int) -> str:
    try:
        return iso(ms)
    except (ValueError, OverflowError, OSError):  # beyond the years a datetime holds
        return f"{ms} ms"


def _looks_like(window: Window, ts: np.ndarray) -> str:
    """What the server's stamps probably are, judged from how they read as epoch ms."""
    inside = (ts >= window.start // 1000) & (ts <= window.end // 1000)
    if inside.mean() > 0.5:
        return f"epoch seconds (e.g. {int(ts[inside][0])})"
    if (ts % DAY_MS == 0).all():
        return f"dates without a time (e.g. {_when(int(ts[0]))[:10]})"
    return f"stamps that read as {_when(int(ts.min()))} .. {_when(int(ts.max()))}"


def check_outside(window: Window, ts: np.ndarray, outside: int) -> None:
    """TimeFormatError if `outside` of the answer's stamps `ts` are more than half of a long answer, if
    any stamp is in another unit (`MAGNITUDE`), or if every stamp is a UTC midnight and two or more fall
    outside: whatever the answer's length."""
    if not outside:
        return
    if len(ts) >= JUDGED_FROM and outside * 2 > len(ts):
        raise TimeFormatError(
            f"the server's time format is not what we read: {outside} of {len(ts)} stamps fall outside "
            f"the window; they look like {_looks_like(window, ts)}"
        )
    far = (ts < window.start // MAGNITUDE) | (ts > window.end * MAGNITUDE)
    if far.any() or (outside > 1 and (ts % DAY_MS == 0).all()):
        raise TimeFormatError(
            f"the server's time format is not what we read: {outside} of {len(ts)} stamps fall outside "
            f"the window; they look like {_looks_like(window, ts[far] if far.any() else ts)}"
        )


def check_collapse(window: Window, ts: np.ndarray) -> None:
    """TimeFormatError if more than half of a long answer's stamps repeat others, `COLLAPSED` or more on
    one instant (a server that sends a chunk twice repeats each point a few times, not dozens)."""
    if len(ts) < JUDGED_FROM or (np.diff(ts) > 0).all():
        return
    _, counts = np.unique(ts, return_counts=True)
    if (len(ts) - len(counts)) * 2 > len(ts) and counts.max() >= COLLAPSED:
        raise TimeFormatError(
            f"the server's time format is not what we read: {len(ts)} points fall on "
            f"{len(counts)} instant(s); they look like {_looks_like(window, ts)}"
        )


def _clean_any(window: Window, data: Points | Candles, counts: Counts) -> WindowData:
    columns = window.series.value_columns
    values = {c: getattr(data, c) for c in columns}
    ts = data.ts
    keep = (ts >= window.start) & (ts < window.end)
    outside = int((~keep).sum() - (ts == window.end).sum())
    if outside:
        check_outside(window, ts, outside)
        counts.points_outside_window += outside
    check_collapse(window, ts)
    present = np.ones(len(ts), dtype=bool)  # a value for every column, none NaN
    finite = np.ones(len(ts), dtype=bool)  # nor ±inf (Infinity, 1e309)
    for c in columns:
        present &= ~np.isnan(values[c])
        finite &= np.isfinite(values[c])
    missing = int((keep & ~present).sum())
    if missing:
        counts.points_without_value += missing
    infinite = int((keep & present & ~finite).sum())
    if infinite:
        counts.points_not_finite += infinite
    keep &= finite
    ts = ts[keep]
    values = {c: v[keep] for c, v in values.items()}
    if len(ts) > 1 and not (np.diff(ts) > 0).all():
        order = np.argsort(ts, kind="stable")
        ts = ts[order]
        values = {c: v[order] for c, v in values.items()}
        first = np.concatenate(([True], np.diff(ts) > 0))
        if not first.all():
            # Each repeat against the first point of its stamp: the same values, or others.
            head = np.maximum.accumulate(np.where(first, np.arange(len(ts)), 0))
            differs = np.zeros(len(ts), dtype=bool)
            for v in values.values():
                differs |= v != v[head]
            conflicting = int(differs.sum())
            if conflicting * 2 >= len(ts) and np.bincount(head[differs]).max() >= PILED - 1:
                raise TimeFormatError(
                    f"the server's time format is not what we read: {len(ts)} points fall on "
                    f"{int(first.sum())} instant(s), piled up with other values; they look like "
                    f"{_looks_like(window, ts)}"
                )
            if conflicting:
                counts.conflicting_duplicates += conflicting
            if (same := int((~first).sum()) - conflicting) > 0:
                counts.duplicate_points += same
            ts = ts[first]
            values = {c: v[first] for c, v in values.items()}
    return WindowData(window, ts, values)


def to_table(series: Series, pieces: list[WindowData], source: str, by_object: bool = False) -> pa.Table:
    """One table for many windows, built column-wise, sorted by ((object_id,) param_id, ts)."""
    schema = SCHEMAS[Series(series)]
    order = (
        (lambda p: (p.window.object_id, p.window.param_id, p.window.start))
        if by_object
        else (lambda p: (p.window.param_id, p.window.start))
    )
    pieces = sorted((p for p in pieces if len(p)), key=order)
    if not pieces:
        return schema.empty_table()
    lengths = [len(p) for p in pieces]
    columns = {
        "source": _repeated([source], [sum(lengths)]),
        "object_id": np.repeat(np.array([p.window.object_id for p in pieces], dtype=np.int64), lengths),
        "param_id": np.repeat(np.array([p.window.param_id for p in pieces], dtype=np.int64), lengths),
        "kind": _repeated([p.window.kind.value for p in pieces], lengths),
        "ts": pa.array(np.concatenate([p.ts for p in pieces]), TS),
    }
    for c in Series(series).value_columns:
        columns[c] = np.concatenate([p.values[c] for p in pieces])
    return pa.table(columns, schema=schema)


def _repeated(values: list[str], counts: list[int]) -> pa.Array:
    """Each value as many times as its count, as one string column built from its buffers: Arrow's `take`
    of a one-value column copies strings row by row."""
    encoded = [v.encode() for v in values]
    sizes = np.repeat(np.array([len(b) for b in encoded], dtype=np.int64), counts)
    data = b"".join(b * n for b, n in zip(encoded, counts, strict=True))
    # Past 2 GiB of text (a pull of some 200 million rows) 32-bit offsets would wrap round: 64-bit ones
    # then, which the schema's cast refuses aloud, as Arrow's `take` did.
    large = len(data) >= 2**31
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(sizes, out=offsets[1:])
    strings = pa.LargeStringArray if large else pa.StringArray
    return strings.from_buffers(len(sizes), pa.py_buffer(offsets), pa.py_buffer(data))
