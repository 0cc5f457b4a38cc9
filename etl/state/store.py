"""Checkpoints on storage: the coverage (etl/state/coverage.py) of one (source, shard).

A store is a base snapshot plus an append-only log: committing a slab writes one small log
segment naming the slab's windows (bytes in proportion to the slab, one PUT on object stores), and now
and then the log is folded into a new base. Each file is written whole under a new name, so a crash at
any moment leaves either the old or the new checkpoint, never a mix:

    {store}/base-{seq}.parquet     coverage up to log segment seq
    {store}/arrivals-{seq}.parquet what arrived up to log segment seq (etl/state/arrivals.py), written
                                   just before its base
    {store}/log/{seq}.json         one slab's windows and what arrived in them, committed after its files
                                   are durable (lake formats: and the table commit that holds them, see
                                   docs/lake-internals.md)
    {store}/lock                   the run lock (etl/state/lock.py)
    {store}/dimensions.json        when the reference tables were last fetched, and for which objects
    {store}/layout.json            what the output of this source is: its files per partition (sink.buckets),
                                   format, partitioning, source name and platform, as first decided
    {store}/renaming.json          a source rename under way (etl state rename-source): from and to
    {store}/progress.json          the history left to load after each of the last runs (a backfill's rate)
    {store}/caps.json              what the answers taught of the server's silent cap on points, and when
    {store}/catalog/{login}.parquet the fleet's parameters as a login last listed them (etl/state/catalog.py)
    {store}/budget.json            the source's store only: what its shards running at once tell each other
                                   of the limit they share (etl/state/budget.py)
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TypedDict

import numpy as np
import orjson
import pyarrow.parquet as pq

from etl.errors import StorageError
from etl.model import Series, Windows
from etl.state.arrivals import Arrivals
from etl.state.catalog import Catalog
from etl.state.coverage import MARKS, Coverage, key_of
from etl.state.lock import Lock, RunLock
from etl.storage.atomic import Storage

log = logging.getLogger(__name__)

SNAPSHOT = "dimensions.json"
LAYOUT = "layout.json"
RENAMING = "renaming.json"
PROGRESS = "progress.json"
CAPS = "caps.json"
PROGRESS_RUNS = 12  # runs whose history left is kept: enough for a rate, whatever the number of runs
# 3: segments carry what arrived (etl/state/arrivals.py); 2 did not.
SEGMENT_VERSION = 3
COMPACT_AFTER = 16  # log segments folded into a new base at the end of a run
_BASE = re.compile(r"base-(\d+)\.parquet")
_ARRIVALS = re.compile(r"arrivals-(\d+)\.parquet")
_SEGMENT = re.compile(r"(\d+)\.json")
_EMPTY = np.empty(0, np.int64)


class SnapshotNote(TypedDict):
    """What the reference tables' last snapshot noted (etl/pipeline/dimensions.py)."""

    fetched: int  # epoch ms
    objects: str  # a digest of the object ids they cover
    sink: str  # the format they were written in


@dataclass(frozen=True)
class Progress:
    """A run's end and the history it left to load, per series: (windows, parameter-milliseconds left,
    parameter-milliseconds there are in all) (etl/pipeline/plan.py `History`)."""

    at: int  # epoch ms
    left: dict[str, tuple[int, int, int]]

    @property
    def left_ms(self) -> int:
        return sum(ms for _, ms, _ in self.left.values())


@dataclass(frozen=True)
class Recorded:
    """What a source's output is (layout.json): how its rows are written and under which name. Kept for the
    output's life: a run whose config says otherwise would write them again beside themselves or not see
    them (etl/pipeline/identity.py). A field None was not recorded (an older version's record)."""

    buckets: int | None = None  # files per partition (sink.buckets)
    format: str | None = None  # sink.format
    partition_by: tuple[str, ...] | None = None  # sink.partition_by
    source: str | None = None  # source.name: the `source` the rows carry
    platform: str | None = None  # source.base_url without credentials: the instance the rows came from
    tables: str | None = None  # postgres: the database and schema of the tables (host:port/db schema)

    def as_json(self) -> bytes:
        body = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v is not None}
        return orjson.dumps(body)


def _marks_of(data: bytes) -> dict[str, int]:
    metadata = pq.read_schema(io.BytesIO(data)).metadata or {}
    return {str(k): int(v) for k, v in orjson.loads(metadata[MARKS]).items()} if MARKS in metadata else {}


def segment(*parts: Windows, mark: tuple[str, int] | None = None, arrivals: Arrivals | None = None) -> bytes:
    """A log segment: the windows of one or more slabs, grouped by (start, end) (a slab's windows mostly
    share them), what arrived in them, and for a lake table the (table, version) of the commit that
    holds them."""
    body: dict[str, object] = {
        "version": SEGMENT_VERSION,
        "windows": [g for windows in parts for g in _groups(windows)],
    }
    if mark is not None:
        body["lake"] = list(mark)
    if arrivals:
        body.update(arrivals.segment())
    return orjson.dumps(body)


def _groups(windows: Windows) -> list[list[object]]:
    if not len(windows):
        return []
    order = np.lexsort((windows.param_id, windows.end, windows.start))
    starts, ends, ids = windows.start[order], windows.end[order], windows.param_id[order]
    cuts = np.flatnonzero((starts[1:] != starts[:-1]) | (ends[1:] != ends[:-1])) + 1
    heads = np.r_[0, cuts]
    return [
        [windows.series.value, a, b, p.tolist()]
        for a, b, p in zip(starts[heads].tolist(), ends[heads].tolist(), np.split(ids, cuts), strict=True)
    ]


def windows_of(data: bytes) -> Windows:
    """A segment's windows back, of its one series (object and kind are not kept: they do not matter to
    coverage)."""
    groups = orjson.loads(data)["windows"]
    series = {Series(s) for s, _, _, _ in groups}
    if len(series) > 1:
        raise ValueError(f"a segment of several series: {sorted(series)}")
    ids = [np.array(params, np.int64) for _, _, _, params in groups]
    param_id = np.concatenate(ids) if ids else _EMPTY
    zeros = np.zeros(len(param_id), np.int64)
    return Windows(
        series.pop() if series else Series.RAW,
        param_id,
        zeros,
        zeros,
        np.concatenate(
            [np.full(len(p), a, np.int64) for (_, a, _, _), p in zip(groups, ids, strict=True)] or [_EMPTY]
        ),
        np.concatenate(
            [np.full(len(p), b, np.int64) for (_, _, b, _), p in zip(groups, ids, strict=True)] or [_EMPTY]
        ),
    )


def _with(base: Arrivals, update: Arrivals | None) -> Arrivals:
    out = Arrivals()
    out.merge(base)
    if update is not None:
        out.merge(update)
    return out


def arrivals_of(data: bytes) -> Arrivals:
    """What arrived in a segment's windows (none for a segment written before arrivals were kept)."""
    return Arrivals.from_segment(orjson.loads(data))


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


class _Legacy(Exception):
    """A segment written before arrivals were kept."""


def _parse_segment(
    data: bytes, seen: dict[str, set[int]], arrivals: Arrivals | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A segment's coverage rows; what arrived goes into `arrivals` (None: read it as a legacy one)."""
    keys, starts, ends = [], [], []
    body = orjson.loads(data)
    if arrivals is not None:
        if body.get("version", 0) < SEGMENT_VERSION:
            raise _Legacy
        arrivals.merge(Arrivals.from_segment(body))
    if "lake" in body:
        table, version = body["lake"]
        seen.setdefault(str(table), set()).add(int(version))
    if "lake_through" in body:  # every version up to this one is accounted for (see StateStore.skip)
        table, version = body["lake_through"]
        seen.setdefault(str(table), set()).update(range(1, int(version) + 1))
    for series, start, end, params in body["windows"]:
        keys.append(key_of(np.array(params, np.int64), Series(series)))
        starts.append(np.full(len(params), start, np.int64))
        ends.append(np.full(len(params), end, np.int64))
    if not keys:
        return _EMPTY, _EMPTY, _EMPTY
    return np.concatenate(keys), np.concatenate(starts), np.concatenate(ends)


class StateStore:
    """The checkpoints and run lock of one (source, shard). Shards never share either, so N sharded
    jobs run side by side without waiting for each other."""

    def __init__(self, storage: Storage, lease_seconds: float = 120.0, run_lock: Lock | None = None) -> None:
        """`run_lock`: the lock to hold instead of the folder's own (PostgreSQL's, which holds it too)."""
        self.storage = storage
        self.run_lock: Lock = run_lock or RunLock(storage, lease_seconds)
        self._seq = 0  # the last log segment applied
        self._bases: list[int] = []
        self._segments: list[int] = []
        # Lake formats: per table, the commit version up to which the checkpoints hold every one of ours.
        self.marks: dict[str, int] = {}
        self._seen: dict[str, set[int]] = {}
        # What arrived (etl/state/arrivals.py), loaded with the coverage and kept up to date by commit.
        self.arrivals = Arrivals()
        self._legacy = False  # loaded from checkpoints written before arrivals were kept

    @contextmanager
    def lock(self, command: str = "run") -> Iterator[None]:
        """Held by one command at a time; `command` is written with the holder (etl doctor tells a run
        that left no record, killed, from a state reset or compact)."""
        with self.run_lock.held(command):
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
        arrivals = Arrivals()
        kept = True  # arrivals are kept in these checkpoints (none written before they were)
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
            rel = f"arrivals-{base:012d}.parquet"
            data = self.storage.read(rel)
            kept = data is not None
            try:
                arrivals = Arrivals.from_parquet(data) if data is not None else arrivals
            except Exception as exc:  # noqa: BLE001 - any damage is the same one line
                raise self._damaged(rel, exc) from None
        pending = [s for s in self._segments if s > base]
        rels = [f"log/{s:012d}.json" for s in pending]
        parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([_EMPTY], [_EMPTY], [_EMPTY])
        seen: dict[str, set[int]] = {}
        for rel, data in zip(rels, self.storage.read_many(rels), strict=True):
            if data is None:
                return None
            try:
                for column, values in zip(parts, _parse_segment(data, seen, arrivals), strict=True):
                    column.append(values)
            except _Legacy:
                kept = False
                for column, values in zip(parts, _parse_segment(data, seen, None), strict=True):
                    column.append(values)
            except (ValueError, KeyError, TypeError) as exc:
                raise self._damaged(rel, exc) from None
        coverage.add_arrays(*(np.concatenate(column) for column in parts))
        self._seq = max([base, *pending])
        self._seen = seen
        self.marks = advance(marks, seen)
        self._legacy = not kept and len(coverage) > 0
        if self._legacy:
            # Checkpoints written before arrivals were kept: a parameter of which none is known counts as
            # having sent its last point where its checkpoint ends, so an upgrade reads nothing again.
            last = np.r_[coverage.key[1:] != coverage.key[:-1], True]
            unknown = last & ~np.isin(coverage.key, arrivals.key)
            arrivals.add_newest(coverage.key[unknown], coverage.end[unknown] - 1)
        self.arrivals = arrivals
        return coverage

    def commit(
        self, *windows: Windows, mark: tuple[str, int] | None = None, arrivals: Arrivals | None = None
    ) -> None:
        """Slabs' windows and what arrived in them, once their files are durable (or their lake commit,
        `mark`, is made)."""
        self.run_lock.check()
        if self._legacy:  # the first segment of an upgraded store carries what load assumed
            arrivals, self._legacy = _with(self.arrivals, arrivals), False
        self._seq += 1
        self.storage.write_atomic(
            f"log/{self._seq:012d}.json", segment(*windows, mark=mark, arrivals=arrivals)
        )
        self._segments.append(self._seq)
        if arrivals:
            self.arrivals.merge(arrivals)
        if mark is not None:
            self._seen.setdefault(mark[0], set()).add(mark[1])
            self.marks = advance(self.marks, {mark[0]: self._seen[mark[0]]})

    def skip(self, table: str, through: int) -> None:
        """Lake formats: count every commit of `table` up to `through` as held, whether or not its
        windows are (a commit older than the table's kept history cannot be read back: its windows are
        fetched again and replace what it wrote)."""
        self.run_lock.check()
        self._seq += 1
        body = orjson.dumps({"version": SEGMENT_VERSION, "windows": [], "lake_through": [table, through]})
        self.storage.write_atomic(f"log/{self._seq:012d}.json", body)
        self._segments.append(self._seq)
        self._seen.setdefault(table, set()).update(range(self.marks.get(table, 0) + 1, through + 1))
        self.marks = advance(self.marks, {table: self._seen[table]})

    def catalog(self, key: str) -> Catalog:
        """The fleet's catalog of a login (`etl.state.catalog.login_key`), written under this store's lock."""
        return Catalog(self.storage, key, self.run_lock)

    def snapshot(self) -> dict[str, object]:
        """What the last reference tables' snapshot noted (etl/pipeline/dimensions.py), or {}: a damaged
        note only makes the tables be fetched again."""
        data = self.storage.read(SNAPSHOT)
        try:
            note = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            return {}
        return note if isinstance(note, dict) else {}

    def note_snapshot(self, note: SnapshotNote) -> None:
        """Once the reference tables it describes are written."""
        self.run_lock.check()
        self.storage.write_atomic(SNAPSHOT, orjson.dumps(note))

    def progress(self) -> list[Progress]:
        """The history left after each of the last runs, oldest first ([] when none is noted, or the note
        is damaged: it only feeds a rate)."""
        data = self.storage.read(PROGRESS)
        try:
            runs = orjson.loads(data)["runs"] if data else []
            return [
                Progress(
                    int(r["at"]), {str(k): (int(w), int(ms), int(t)) for k, (w, ms, t) in r["left"].items()}
                )
                for r in runs
            ]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return []

    def note_progress(self, run: Progress) -> list[Progress]:
        """Note this run's history left, keeping the last PROGRESS_RUNS; all of them back."""
        self.run_lock.check()
        runs = [*self.progress(), run][-PROGRESS_RUNS:]
        body = {"runs": [{"at": r.at, "left": r.left} for r in runs]}
        self.storage.write_atomic(PROGRESS, orjson.dumps(body))
        return runs

    def caps(self) -> tuple[int, dict[str, list[int | None]]]:
        """When the server's answers were last learned from scratch, and what they taught
        (etl/client/count_cap.py); (0, {}) when nothing is noted or the note is damaged."""
        data = self.storage.read(CAPS)
        try:
            body = orjson.loads(data) if data else {}
            return int(body["at"]), dict(body["routes"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return 0, {}

    def note_caps(self, at: int, routes: dict[str, list[int | None]]) -> None:
        self.run_lock.check()
        self.storage.write_atomic(CAPS, orjson.dumps({"at": at, "routes": routes}))

    def layout(self) -> Recorded:
        """What the output of this store's source was recorded to be (nothing recorded: all None)."""
        data = self.storage.read(LAYOUT)
        if data is None:
            return Recorded()
        try:
            body = orjson.loads(data)
            buckets, partition_by = body.get("buckets"), body.get("partition_by")
            texts = {k: body.get(k) for k in ("format", "source", "platform", "tables")}
            valid = (
                isinstance(buckets, int)
                and not isinstance(buckets, bool)
                and buckets >= 1
                and all(v is None or isinstance(v, str) for v in texts.values())
                and (partition_by is None or all(isinstance(v, str) for v in partition_by))
            )
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            valid = False
        if not valid:
            raise StorageError(
                f"damaged checkpoint file {self.storage.display(LAYOUT)}: not the layout etl writes; "
                "restore it, or remove it and set sink.buckets to the count the dataset's files have"
            )
        return Recorded(buckets, partition_by=None if partition_by is None else tuple(partition_by), **texts)

    def buckets(self) -> int | None:
        """The files per partition the dataset was written with (sink.buckets), or None if not recorded."""
        return self.layout().buckets

    def note_layout(self, recorded: Recorded) -> None:
        """Before the first file of that layout is written."""
        self.run_lock.check()
        self.storage.write_atomic(LAYOUT, recorded.as_json())

    def renaming(self) -> dict[str, object] | None:
        """A source rename under way in this folder ({"from": ..., "to": ..., "copied": ...}), or None."""
        data = self.storage.read(RENAMING)
        try:
            body = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            body = None
        if data and not (
            isinstance(body, dict) and all(isinstance(body.get(k), str) for k in ("from", "to"))
        ):
            raise StorageError(
                f"damaged checkpoint file {self.storage.display(RENAMING)}: not what etl writes"
            )
        return body

    def compact(self, coverage: Coverage, *, force: bool = False) -> None:
        """Fold the log into a new base (when it has grown, or always with force)."""
        base = self._bases[-1] if self._bases else 0
        if not force and len([s for s in self._segments if s > base]) < COMPACT_AFTER:
            return
        self.run_lock.check()
        # Arrivals first: a base is never without its arrivals file.
        self.storage.write_atomic(f"arrivals-{self._seq:012d}.parquet", self.arrivals.to_parquet())
        self.storage.write_atomic(f"base-{self._seq:012d}.parquet", coverage.to_parquet(self.marks))
        self._legacy = False
        # The new base is durable: what it replaces can go (a crash here leaves files the next load ignores).
        for seq in self._bases:
            if seq != self._seq:
                self.storage.remove(f"base-{seq:012d}.parquet")
        for name in self.storage.listdir(""):
            if (m := _ARRIVALS.fullmatch(name)) and int(m.group(1)) != self._seq:
                self.storage.remove(name)
        for seq in self._segments:
            self.storage.remove(f"log/{seq:012d}.json")
        self._bases, self._segments = [self._seq], []
        self._seen = {}

    def replace(self, coverage: Coverage) -> None:
        """Make `coverage` the whole state (after a reset)."""
        self._seq += 1
        self.compact(coverage, force=True)
