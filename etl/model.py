"""The pipeline's vocabulary: series, parameter kinds, the window, shards and buckets, output schemas.

A window (one parameter's series over [start, end)) is the unit of the whole pipeline: planned,
fetched, written, checkpointed and reported as failed as a `Window`. This module imports nothing of
the pipeline; strings (paths, JSON keys, labels) are turned into these types at the edges.

Time is epoch milliseconds, UTC. Every interval we keep is half-open, [start, end). The platform
answers inclusive intervals (a point stamped exactly at `end` comes back too); `keep_span` and
`Window.request` are the only places that know it.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, overload

import numpy as np
import pyarrow as pa

from etl.timeutil import iso


class Series(StrEnum):
    RAW = "raw"
    AVERAGE = "average"
    CANDLES = "candles"

    @property
    def value_columns(self) -> tuple[str, ...]:
        return ("open", "high", "low", "close") if self is Series.CANDLES else ("value",)


class ParamKind(StrEnum):
    PHYSICAL = "physical"
    CALCULATED = "calculated"
    SIGNAL = "signal"  # a physical parameter whose values are 0 or 1


SERIES = tuple(Series)
PARAM_KINDS = tuple(ParamKind)


@dataclass(frozen=True, slots=True)
class Param:
    """What the pipeline needs of a parameter: its id, its object and its kind (which picks the route)."""

    id: int
    object_id: int
    kind: ParamKind


@dataclass(frozen=True)
class Params:
    """Parameters column-wise, sorted by id, each once: a fleet is tens of thousands of them, and one
    Python object each would scatter over the allocator's arenas for the whole run."""

    id: np.ndarray  # int64
    object_id: np.ndarray  # int64
    kind: np.ndarray  # int8, positions in PARAM_KINDS

    @classmethod
    def of(cls, params: Iterable[Param]) -> Params:
        rows = sorted(
            {p.id: p for p in reversed(list(params))}.values(), key=lambda p: p.id
        )  # the first of an id
        return cls(
            np.array([p.id for p in rows], np.int64),
            np.array([p.object_id for p in rows], np.int64),
            np.array([PARAM_KINDS.index(p.kind) for p in rows], np.int8),
        )

    def __len__(self) -> int:
        return len(self.id)

    def __iter__(self) -> Iterator[Param]:
        for i, o, k in zip(self.id.tolist(), self.object_id.tolist(), self.kind.tolist(), strict=True):
            yield Param(i, o, PARAM_KINDS[k])

    def of_shard(self, shard: Shard | None) -> Params:
        if shard is None:
            return self
        mine = np.fromiter((shard.contains(i) for i in self.id.tolist()), bool, len(self.id))
        return Params(self.id[mine], self.object_id[mine], self.kind[mine])


class Window(NamedTuple):
    """One parameter's series over [start, end) (epoch ms, UTC). A named tuple: a plan makes one per
    request, hundreds of thousands for a wide fleet, and a tuple is cheaper to make than a frozen
    dataclass."""

    param_id: int
    object_id: int
    kind: ParamKind
    series: Series
    start: int
    end: int

    @property
    def param(self) -> Param:
        return Param(self.param_id, self.object_id, self.kind)

    def request(self) -> tuple[int, int]:
        """The bounds to send: the server includes both, so the point at `end` comes back and is dropped
        (it belongs to the next window)."""
        return self.start, self.end

    def describe(self) -> str:
        return f"param {self.param_id} {self.series} {iso(self.start)}..{iso(self.end)}"


class Windows(Sequence[Window]):
    """Windows of one series, column-wise. A slab names up to a bucket's parameters times its spans (tens
    of thousands for a wide fleet); it keeps them as arrays, and a `Window` exists only while one is used."""

    __slots__ = ("series", "param_id", "object_id", "kind", "start", "end")
    _CHUNK = 1024  # windows made at a time when iterating

    def __init__(
        self,
        series: Series,
        param_id: np.ndarray,
        object_id: np.ndarray,
        kind: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
    ) -> None:
        self.series = Series(series)
        self.param_id, self.object_id = np.asarray(param_id, np.int64), np.asarray(object_id, np.int64)
        self.kind = np.asarray(kind, np.int8)  # positions in PARAM_KINDS
        self.start, self.end = np.asarray(start, np.int64), np.asarray(end, np.int64)

    @classmethod
    def of(cls, series: Series, windows: Iterable[Window]) -> Windows:
        """Windows of `series` (all of them must be of it)."""
        rows = []
        for w in windows:
            if w.series != series:
                raise ValueError(f"{w.describe()} is not a {series} window")
            rows.append((w.param_id, w.object_id, PARAM_KINDS.index(w.kind), w.start, w.end))
        columns = zip(*rows, strict=True) if rows else ((),) * 5
        return cls(series, *(np.array(c, np.int64) for c in columns))

    @classmethod
    def concat(cls, series: Series, parts: Sequence[Windows]) -> Windows:
        """Windows of `series` from parts of it, in order."""
        if any(part.series != series for part in parts):
            raise ValueError(f"windows of another series than {series}")
        if not parts:
            return cls.of(series, ())
        columns = ("param_id", "object_id", "kind", "start", "end")
        return cls(series, *(np.concatenate([getattr(part, c) for part in parts]) for c in columns))

    def __len__(self) -> int:
        return len(self.param_id)

    @overload
    def __getitem__(self, index: int | np.integer) -> Window: ...

    @overload
    def __getitem__(self, index: slice | np.ndarray) -> Windows: ...

    def __getitem__(self, index: int | np.integer | slice | np.ndarray) -> Window | Windows:
        """An int gives a Window; a slice, an index array or a mask gives Windows."""
        if isinstance(index, int | np.integer):
            kind = PARAM_KINDS[int(self.kind[index])]
            return Window(
                int(self.param_id[index]),
                int(self.object_id[index]),
                kind,
                self.series,
                int(self.start[index]),
                int(self.end[index]),
            )
        return Windows(
            self.series,
            self.param_id[index],
            self.object_id[index],
            self.kind[index],
            self.start[index],
            self.end[index],
        )

    def clip(self, start: int, end: int) -> Windows:
        """The part of each window within [start, end) (a partition's day: its rows and what it replaces)."""
        return Windows(
            self.series,
            self.param_id,
            self.object_id,
            self.kind,
            np.maximum(self.start, start),
            np.minimum(self.end, end),
        )

    def __iter__(self) -> Iterator[Window]:
        for lo in range(0, len(self), self._CHUNK):
            part = slice(lo, lo + self._CHUNK)
            for p, o, k, s, e in zip(
                self.param_id[part].tolist(),
                self.object_id[part].tolist(),
                self.kind[part].tolist(),
                self.start[part].tolist(),
                self.end[part].tolist(),
                strict=True,
            ):
                yield Window(p, o, PARAM_KINDS[k], self.series, s, e)

    def __repr__(self) -> str:
        return f"Windows({self.series}, {len(self)})"


def batches(param_ids: np.ndarray, size: int) -> list[tuple[int, int]]:
    """[lo, hi) index ranges of whole parameters, each cut at the first parameter boundary at or past
    `size` windows (one parameter's windows of a slab are never split: they go to one file together)."""
    out, lo, n = [], 0, len(param_ids)
    changes = np.flatnonzero(param_ids[1:] != param_ids[:-1]) + 1
    for i in [*changes.tolist(), n] if n else []:
        if i == n or i - lo >= size:
            out.append((lo, i))
            lo = i
    return out


def keep_span(ts: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Positions [lo, hi) of the stamps in [start, end) in an ascending array (an inclusive answer's
    point at `end` falls out here)."""
    lo, hi = np.searchsorted(ts, (start, end))
    return int(lo), int(hi)


def cut(start: int, end: int, step: int) -> list[tuple[int, int]]:
    """[start, end) cut at every multiple of `step` (epoch-aligned: UTC midnights for a day)."""
    pieces = []
    while start < end:
        boundary = start - start % step + step
        pieces.append((start, min(end, boundary)))
        start = pieces[-1][1]
    return pieces


def cut_columns(start: np.ndarray, end: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`cut` of many intervals at once: (the interval each piece comes from, piece starts, piece ends)."""
    first = start // step
    count = (end - 1) // step - first + 1
    index = np.repeat(np.arange(len(start)), count)
    nth = np.arange(len(index)) - np.repeat(np.cumsum(count) - count, count)
    boundary = (first[index] + nth) * step
    return index, np.maximum(start[index], boundary), np.minimum(end[index], boundary + step)


def requests_of(start: np.ndarray, end: np.ndarray, unit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals as requests of at most `unit`: one that fits is asked whole, wherever it lies (a raw tail
    across midnight is one request); a longer one is `cut` at multiples of `unit`. As `cut_columns`."""
    whole = end - start <= unit
    index, s, e = cut_columns(start[~whole], end[~whole], unit)
    kept = np.flatnonzero(whole)
    index = np.r_[kept, np.flatnonzero(~whole)[index]]
    order = np.lexsort((np.r_[start[kept], s], index))
    return index[order], np.r_[start[kept], s][order], np.r_[end[kept], e][order]


def union(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals sorted by (key, start), overlapping or touching ones of a key merged, empty ones gone."""
    keep = start < end
    key, start, end = key[keep], start[keep], end[keep]
    if not len(key):
        return (np.empty(0, np.int64),) * 3
    order = np.lexsort((start, key))
    key, start, end = key[order], start[order], end[order]
    new_key = np.r_[True, key[1:] != key[:-1]]
    # The running maximum of `end` within each key: shift each key's ends above every earlier key's.
    group = np.cumsum(new_key) - 1
    low, span = int(start.min()), int(end.max() - start.min()) + 1
    if int(group[-1]) * span < 2**62:
        shifted = group * span + (end - low)
        reach = np.maximum.accumulate(shifted) - group * span + low
    else:  # absurd spans: the plain loop
        reach = end.copy()
        for i in range(1, len(end)):
            if not new_key[i]:
                reach[i] = max(reach[i - 1], end[i])
    first = new_key | (start > np.r_[np.iinfo(np.int64).min, reach[:-1]])
    at = np.flatnonzero(first)
    return key[at], start[at], np.maximum.reduceat(end, at)


def slug(text: str) -> str:
    """A name safe in paths and file names (a source's default name: its host)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "source"


def _crc(param_id: int) -> int:
    # crc32, not hash(): the same on every run, machine and Python version.
    return zlib.crc32(str(param_id).encode())


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard `index` of `count`: the parameters whose crc32 of the decimal id is `index` modulo `count`."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: I must be in 0..N-1")

    def contains(self, param_id: int) -> bool:
        return _crc(param_id) % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def label(self) -> str:
        """In file names: part-...-s{I}of{N}-..."""
        return f"s{self.index}of{self.count}"

    @property
    def folder(self) -> str:
        """Its checkpoints and lock: {state}/shard-{I}of{N}/"""
        return f"shard-{self.index}of{self.count}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """'I/N'."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not match:
            raise ValueError(f"{text!r} is not a shard: use I/N, e.g. 0/4")
        return cls(int(match.group(1)), int(match.group(2)))

    @classmethod
    def from_label(cls, text: str) -> Shard | None:
        match = re.fullmatch(r"s(\d+)of(\d+)", text)
        return cls(int(match.group(1)), int(match.group(2))) if match else None

    @classmethod
    def from_folder(cls, text: str) -> Shard | None:
        match = re.fullmatch(r"shard-(\d+)of(\d+)", text)
        return cls(int(match.group(1)), int(match.group(2))) if match else None


def bucket_of(param_id: int, buckets: int) -> int:
    """The file bucket of a parameter within a partition. The high half of the crc, so that it is
    independent of the shard (the low bits modulo N)."""
    return (_crc(param_id) >> 16) % buckets


# -- output schemas ----------------------------------------------------------------------------------

TS = pa.timestamp("ms", tz="UTC")
KEY_COLUMNS = (
    pa.field("source", pa.string()),
    pa.field("object_id", pa.int64()),
    pa.field("param_id", pa.int64()),
    pa.field("kind", pa.string()),
    pa.field("ts", TS),
)
SCHEMAS: dict[Series, pa.Schema] = {
    series: pa.schema([*KEY_COLUMNS, *(pa.field(c, pa.float64()) for c in series.value_columns)])
    for series in Series
}

# The quality dataset (etl/quality/): one row per parameter and UTC day of its raw series, laid out
# like the series (partitioned by date, a file per bucket); `day` (the day's midnight) is the time key
# its rows are sorted and replaced by.
QUALITY = "quality"
QUALITY_TIME_KEY = "day"
QUALITY_SCHEMA = pa.schema(
    [
        *KEY_COLUMNS[:4],
        pa.field(QUALITY_TIME_KEY, TS),
        pa.field("points", pa.int64()),
        pa.field("expected_points", pa.int64()),  # null: no period could be inferred (fewer than 2 points)
        pa.field("completeness", pa.float64()),  # 0..1; null where expected_points is
        pa.field("longest_gap_seconds", pa.float64()),
        pa.field("flatline_seconds", pa.float64()),
        pa.field("first_ts", TS),
        pa.field("last_ts", TS),
        pa.field("period_seconds", pa.float64()),  # the inferred sampling period
        pa.field("span_seconds", pa.float64()),  # the part of the day the row describes
        # Points that reached the platform after a run had read past their stamps, and the longest such
        # a point took at least (null: none late); see etl/pipeline/late.py.
        pa.field("late_points", pa.int64()),
        pa.field("late_seconds", pa.float64()),
    ]
)
