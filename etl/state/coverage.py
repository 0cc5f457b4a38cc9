"""Coverage: per (parameter, series), the time already written, as merged [start, end) intervals.

Coverage is kept as the list of completed intervals, merged when adjacent (as Airbyte's concurrent
cursor), so windows finishing out of order resume correctly and failed windows stay open. It is held
column-wise (three int64 arrays), a few MB for 100,000 parameters x 3 series, however long the history.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import cast

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from etl.model import SERIES, Series, Windows, union
from etl.timeutil import iso

_CODE = {series: code for code, series in enumerate(SERIES)}
_EMPTY = np.empty(0, np.int64)
NONE = np.iinfo(np.int64).min  # no time: nothing covered, nothing received
MARKS = b"etl.lake_marks"  # a base's Parquet metadata: the lake tables' commit versions it includes


def key_of(param_id: np.ndarray, series: Series) -> np.ndarray:
    """The coverage key of a (parameter, series): param_id * 4 + the series' code."""
    return np.asarray(param_id, np.int64) * 4 + _CODE[Series(series)]


def intervals_of(windows: Windows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows as coverage rows (key, start, end), to merge in later with `Coverage.add_arrays`."""
    return key_of(windows.param_id, windows.series), windows.start, windows.end


class Coverage:
    """Covered [start, end) intervals per (parameter, series): sorted by (key, start), merged."""

    __slots__ = ("key", "start", "end")

    def __init__(
        self, key: np.ndarray = _EMPTY, start: np.ndarray = _EMPTY, end: np.ndarray = _EMPTY
    ) -> None:
        self.key, self.start, self.end = key, start, end

    @classmethod
    def of(cls, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> Coverage:
        return cls(*union(np.asarray(key, np.int64), np.asarray(start, np.int64), np.asarray(end, np.int64)))

    def __len__(self) -> int:
        """Keys (parameter, series) with any coverage."""
        return int(np.count_nonzero(np.r_[True, self.key[1:] != self.key[:-1]])) if len(self.key) else 0

    def add(self, windows: Windows) -> None:
        if len(windows):
            self.add_arrays(*intervals_of(windows))

    def add_arrays(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Merge new intervals in; only the keys they touch are re-merged."""
        touched = np.unique(key)
        lo, hi = np.searchsorted(self.key, touched, "left"), np.searchsorted(self.key, touched, "right")
        marks = np.zeros(len(self.key) + 1, np.int64)
        np.add.at(marks, lo, 1)
        np.add.at(marks, hi, -1)
        inside = np.cumsum(marks[:-1]) > 0
        merged = union(
            np.r_[self.key[inside], key], np.r_[self.start[inside], start], np.r_[self.end[inside], end]
        )
        rest = ~inside
        all_key = np.r_[self.key[rest], merged[0]]
        order = np.argsort(all_key, kind="stable")  # a key's rows all come from one side, in order
        self.key = all_key[order]
        self.start = np.r_[self.start[rest], merged[1]][order]
        self.end = np.r_[self.end[rest], merged[2]][order]

    def intervals(self, param_id: int, series: Series) -> list[tuple[int, int]]:
        key = int(key_of(np.array(param_id), series))
        lo, hi = np.searchsorted(self.key, [key, key + 1])
        return list(zip(self.start[lo:hi].tolist(), self.end[lo:hi].tolist(), strict=True))

    def high_water(self, param_id: int, series: Series) -> int | None:
        covered = self.intervals(param_id, series)
        return covered[-1][1] if covered else None

    def high_waters(self, series: Series, param_ids: np.ndarray) -> np.ndarray:
        """Each parameter's covered end of a series (the last interval's), or NONE."""
        wanted = key_of(param_ids, series)
        if not len(self.key):
            return np.full(len(wanted), NONE, np.int64)
        at = np.searchsorted(self.key, wanted, "right") - 1  # the key's last interval, if it has one
        hit = (at >= 0) & (self.key[np.maximum(at, 0)] == wanted)
        return np.where(hit, self.end[np.maximum(at, 0)], NONE)

    def of_series(self, series: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(param_id, start, end) of one series, sorted by (param_id, start)."""
        pick = self.key % 4 == _CODE[Series(series)]
        return self.key[pick] // 4, self.start[pick], self.end[pick]

    def reset(
        self, param_ids: set[int] | None = None, series: set[str] | None = None, since: int | None = None
    ) -> int:
        """Forget the coverage of these parameters and series (None: all), from `since` on (None: all of
        it); returns the keys (parameter, series) that lost any."""
        doomed = np.ones(len(self.key), bool)
        if param_ids is not None:
            doomed &= np.isin(self.key // 4, list(param_ids))
        if series is not None:
            doomed &= np.isin(self.key % 4, [_CODE[Series(s)] for s in series])
        if since is not None:
            doomed &= self.end > since
        forgotten = len(Coverage(self.key[doomed]))
        if since is not None:  # an interval across `since` keeps its part before it
            cut = doomed & (self.start < since)
            self.end = np.where(cut, since, self.end)
            doomed &= ~cut
        self.key, self.start, self.end = self.key[~doomed], self.start[~doomed], self.end[~doomed]
        return forgotten

    def rows(self) -> Iterator[dict[str, int | str]]:
        """One row per (parameter, series), for people."""
        if not len(self.key):
            return
        at = np.flatnonzero(np.r_[True, self.key[1:] != self.key[:-1]])
        for lo, hi in zip(at.tolist(), [*at[1:].tolist(), len(self.key)], strict=True):
            key = int(self.key[lo])
            spans = list(zip(self.start[lo:hi].tolist(), self.end[lo:hi].tolist(), strict=True))
            yield {
                "param_id": key // 4,
                "series": SERIES[key % 4].value,
                "high_water": iso(spans[-1][1]),
                "intervals": len(spans),
                "covered": ", ".join(f"{iso(s)}..{iso(e)}" for s, e in spans),
            }

    # -- on disk ---------------------------------------------------------------------------------------

    def to_parquet(self, marks: dict[str, int] | None = None) -> bytes:
        """`marks`: the lake tables' commit versions the coverage includes (kept in the file's metadata)."""
        series = pa.DictionaryArray.from_arrays(
            pa.array(self.key % 4, pa.int8()), pa.array([s.value for s in SERIES])
        )
        table = pa.table({"param_id": self.key // 4, "series": series, "start": self.start, "end": self.end})
        if marks:
            table = table.replace_schema_metadata({MARKS: orjson.dumps(marks)})
        return parquet_bytes(table)

    @classmethod
    def from_parquet(cls, data: bytes) -> Coverage:
        table = pq.read_table(io.BytesIO(data))
        codes = pc.index_in(
            table.column("series").cast(pa.string()), value_set=pa.array([s.value for s in SERIES])
        )
        if codes.null_count:
            raise ValueError("unknown series name")
        codes = codes.to_numpy(zero_copy_only=False).astype(np.int64)
        return cls.of(
            table.column("param_id").to_numpy() * 4 + codes,
            table.column("start").to_numpy(),
            table.column("end").to_numpy(),
        )


def parquet_bytes(table: pa.Table) -> bytes:
    """A state table as the bytes of a zstd Parquet file (checkpoint bases and the arrivals beside them)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return cast(bytes, sink.getvalue().to_pybytes())
