"""Checkpoints: per (parameter, series), the time already written, as merged [start, end) intervals.

Coverage is kept as the list of completed intervals, merged when adjacent (as Airbyte's concurrent
cursor), so windows finishing out of order resume correctly and failed windows stay open. It is held
column-wise (three int64 arrays), a few MB for 100,000 parameters x 3 series, however long the history.

On storage a store is a base snapshot plus an append-only log: committing a slab writes one small log
segment naming the slab's windows (bytes in proportion to the slab, one PUT on object stores), and now
and then the log is folded into a new base. Each file is written whole under a new name, so a crash at
any moment leaves either the old or the new checkpoint, never a mix:

    {store}/base-{seq}.parquet     coverage up to log segment seq
    {store}/log/{seq}.json         one slab's windows, committed after its files are durable
                                   (lake formats: and the table commit that holds them, see docs/lake.md)
    {store}/lock                   the run lock (etl/lock.py)
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from etl.errors import StorageError
from etl.model import SERIES, ParamKind, Series, Window, Windows
from etl.state.lock import RunLock
from etl.storage.files import Storage
from etl.timeutil import iso

log = logging.getLogger(__name__)

COMPACT_AFTER = 16  # log segments folded into a new base at the end of a run
_CODE = {series: code for code, series in enumerate(SERIES)}
_BASE = re.compile(r"base-(\d+)\.parquet")
_SEGMENT = re.compile(r"(\d+)\.json")
_EMPTY = np.empty(0, np.int64)
_MARKS = b"etl.lake_marks"


def _key(param_id: np.ndarray | int, series: Series) -> np.ndarray | int:
    return param_id * 4 + _CODE[Series(series)]


def intervals_of(windows: Windows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows as coverage rows (key, start, end), to merge in later with `Coverage.add_arrays`."""
    return _key(windows.param_id, windows.series), windows.start, windows.end


def union(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals sorted by (key, start), overlapping or touching ones of a key merged, empty ones gone."""
    keep = start < end
    key, start, end = key[keep], start[keep], end[keep]
    if not len(key):
        return _EMPTY, _EMPTY, _EMPTY
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

    def add(self, windows: Windows | Iterable[Window]) -> None:
        if isinstance(windows, Windows):
            if len(windows):
                self.add_arrays(*intervals_of(windows))
            return
        windows = list(windows)
        if windows:
            self.add_arrays(
                np.array([_key(w.param_id, w.series) for w in windows], np.int64),
                np.array([w.start for w in windows], np.int64),
                np.array([w.end for w in windows], np.int64),
            )

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
        key = _key(param_id, series)
        lo, hi = np.searchsorted(self.key, [key, key + 1])
        return list(zip(self.start[lo:hi].tolist(), self.end[lo:hi].tolist(), strict=True))

    def high_water(self, param_id: int, series: Series) -> int | None:
        covered = self.intervals(param_id, series)
        return covered[-1][1] if covered else None

    def of_series(self, series: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(param_id, start, end) of one series, sorted by (param_id, start)."""
        pick = self.key % 4 == _CODE[Series(series)]
        return self.key[pick] // 4, self.start[pick], self.end[pick]

    def reset(self, param_ids: set[int] | None = None, series: set[str] | None = None) -> int:
        """Forget the coverage of these parameters and series (None: all); returns the keys forgotten."""
        doomed = np.ones(len(self.key), bool)
        if param_ids is not None:
            doomed &= np.isin(self.key // 4, list(param_ids))
        if series is not None:
            doomed &= np.isin(self.key % 4, [_CODE[Series(s)] for s in series])
        forgotten = len(Coverage(self.key[doomed]))
        self.key, self.start, self.end = self.key[~doomed], self.start[~doomed], self.end[~doomed]
        return forgotten

    def rows(self) -> Iterator[dict]:
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
            table = table.replace_schema_metadata({_MARKS: orjson.dumps(marks)})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        return sink.getvalue().to_pybytes()

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


def _marks_of(data: bytes) -> dict[str, int]:
    metadata = pq.read_schema(io.BytesIO(data)).metadata or {}
    return {str(k): int(v) for k, v in orjson.loads(metadata[_MARKS]).items()} if _MARKS in metadata else {}


def segment(windows: Windows | list[Window], mark: tuple[str, int] | None = None) -> bytes:
    """A log segment: the windows, grouped by (series, start, end) (a slab's windows mostly share them),
    and for a lake table the (table, version) of the commit that holds them."""
    groups = []
    for series in sorted(SERIES):  # by name, as earlier segments were
        mine = (
            windows
            if isinstance(windows, Windows)
            else Windows.of(series, (w for w in windows if w.series == series))
        )
        if mine.series != series or not len(mine):
            continue
        order = np.lexsort((mine.param_id, mine.end, mine.start))
        starts, ends, ids = mine.start[order], mine.end[order], mine.param_id[order]
        cuts = np.flatnonzero((starts[1:] != starts[:-1]) | (ends[1:] != ends[:-1])) + 1
        heads = np.r_[0, cuts]
        groups += [
            [series.value, a, b, p.tolist()]
            for a, b, p in zip(starts[heads].tolist(), ends[heads].tolist(), np.split(ids, cuts), strict=True)
        ]
    body = {"version": 2, "windows": groups}
    if mark is not None:
        body["lake"] = list(mark)
    return orjson.dumps(body)


def windows_of(data: bytes) -> list[Window]:
    """A segment's windows back (object and kind are not kept: they do not matter to coverage)."""
    return [
        Window(p, 0, ParamKind.PHYSICAL, Series(s), a, b)
        for s, a, b, params in orjson.loads(data)["windows"]
        for p in params
    ]


def advance(marks: dict[str, int], seen: dict[str, set[int]]) -> dict[str, int]:
    """Each table's highest commit version below which every one of ours is in the checkpoints: versions
    land out of order (slabs finish in any order), so only an unbroken run from the last mark counts."""
    out = dict(marks)
    for table, versions in seen.items():
        mark = out.get(table, 0)
        while mark + 1 in versions:
            mark += 1
        out[table] = mark
    return out


def _parse_segment(data: bytes, seen: dict[str, set[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys, starts, ends = [], [], []
    body = orjson.loads(data)
    if "lake" in body:
        table, version = body["lake"]
        seen.setdefault(str(table), set()).add(int(version))
    for series, start, end, params in body["windows"]:
        keys.append(_key(np.array(params, np.int64), Series(series)))
        starts.append(np.full(len(params), start, np.int64))
        ends.append(np.full(len(params), end, np.int64))
    if not keys:
        return _EMPTY, _EMPTY, _EMPTY
    return np.concatenate(keys), np.concatenate(starts), np.concatenate(ends)


class StateStore:
    """The checkpoints and run lock of one (source, shard). Shards never share either, so N sharded
    jobs run side by side without waiting for each other."""

    def __init__(self, storage: Storage, lease_seconds: float = 120.0) -> None:
        self.storage = storage
        self.run_lock = RunLock(storage, lease_seconds)
        self._seq = 0  # the last log segment applied
        self._bases: list[int] = []
        self._segments: list[int] = []
        # Lake formats: per table, the commit version up to which the checkpoints hold every one of ours.
        self.marks: dict[str, int] = {}
        self._seen: dict[str, set[int]] = {}

    @contextmanager
    def lock(self) -> Iterator[None]:
        with self.run_lock.held():
            yield

    def _damaged(self, rel: str, exc: BaseException) -> StorageError:
        return StorageError(
            f"checkpoint file {self.storage.display(rel)} is damaged ({exc}); "
            "move it away or run 'etl state reset'"
        )

    def load(self) -> Coverage:
        for _ in range(3):
            coverage = self._load()
            if coverage is not None:
                return coverage
        raise StorageError(f"the checkpoints in {self.storage.display()} kept changing while being read")

    def _load(self) -> Coverage | None:
        """None when a file listed went away meanwhile (a running job folded its log): read again."""
        self._bases = sorted(int(m.group(1)) for n in self.storage.listdir("") if (m := _BASE.fullmatch(n)))
        self._segments = sorted(
            int(m.group(1)) for n in self.storage.listdir("log") if (m := _SEGMENT.fullmatch(n))
        )
        base = self._bases[-1] if self._bases else 0
        coverage = Coverage()
        marks: dict[str, int] = {}
        if self._bases:
            rel = f"base-{base:012d}.parquet"
            data = self.storage.read(rel)
            if data is None:
                return None
            try:
                coverage = Coverage.from_parquet(data)
                marks = _marks_of(data)
            except Exception as exc:  # noqa: BLE001 - any damage is the same one line
                raise self._damaged(rel, exc) from None
        pending = [s for s in self._segments if s > base]
        rels = [f"log/{s:012d}.json" for s in pending]
        parts: tuple[list, list, list] = ([_EMPTY], [_EMPTY], [_EMPTY])
        seen: dict[str, set[int]] = {}
        for rel, data in zip(rels, self.storage.read_many(rels), strict=True):
            if data is None:
                return None
            try:
                for column, values in zip(parts, _parse_segment(data, seen), strict=True):
                    column.append(values)
            except (ValueError, KeyError, TypeError) as exc:
                raise self._damaged(rel, exc) from None
        coverage.add_arrays(*(np.concatenate(column) for column in parts))
        self._seq = max([base, *pending])
        self._seen = seen
        self.marks = advance(marks, seen)
        return coverage

    def commit(self, windows: list[Window], mark: tuple[str, int] | None = None) -> None:
        """One slab's windows, once its files are durable (or its lake commit, `mark`, is made)."""
        self.run_lock.check()
        self._seq += 1
        self.storage.write_atomic(f"log/{self._seq:012d}.json", segment(windows, mark))
        self._segments.append(self._seq)
        if mark is not None:
            self._seen.setdefault(mark[0], set()).add(mark[1])
            self.marks = advance(self.marks, {mark[0]: self._seen[mark[0]]})

    def compact(self, coverage: Coverage, *, force: bool = False) -> None:
        """Fold the log into a new base (when it has grown, or always with force)."""
        base = self._bases[-1] if self._bases else 0
        if not force and len([s for s in self._segments if s > base]) < COMPACT_AFTER:
            return
        self.run_lock.check()
        self.storage.write_atomic(f"base-{self._seq:012d}.parquet", coverage.to_parquet(self.marks))
        # The new base is durable: what it replaces can go (a crash here leaves files the next load ignores).
        for seq in self._bases:
            if seq != self._seq:
                self.storage.remove(f"base-{seq:012d}.parquet")
        for seq in self._segments:
            self.storage.remove(f"log/{seq:012d}.json")
        self._bases, self._segments = [self._seq], []
        self._seen = {}

    def replace(self, coverage: Coverage) -> None:
        """Make `coverage` the whole state (after a reset)."""
        self._seq += 1
        self.compact(coverage, force=True)
