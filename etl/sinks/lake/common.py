"""What Delta Lake and Iceberg tables share here: the checkpoint a commit carries, the rows a slab
replaces, the columns a table holds, and the interface the writer, the recovery and the readers use.

A slab's commit replaces exactly the (parameter, window) ranges it fetched: one transaction deletes the
rows matching `Replace` and appends the fetched rows. The same commit carries the slab's `Checkpoint`
(docs/lake.md): which run of which app made it, a per-(table, app) version counting our commits, and the
slab's windows in the state log's own encoding, so the checkpoints can be rebuilt from the table alone.
"""

from __future__ import annotations

import base64
import threading
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from etl.model import Windows
from etl.state.store import segment, windows_of

# Both formats keep timestamps in microseconds (Delta's TIMESTAMP, Iceberg's timestamptz).
TS_US = pa.timestamp("us", tz="UTC")
APP, VERSION, RUN, WINDOWS = "etl.app", "etl.version", "etl.run", "etl.windows"


@dataclass(frozen=True)
class Checkpoint:
    """One slab's checkpoint, as it rides in the table commit that holds its rows."""

    app: str  # etl-{source}[-s{I}of{N}]: one writer's commits, whatever other writers add to the table
    version: int  # 1, 2, ... per (table, app): the state log records the last one it holds
    run: str
    windows: Windows

    def properties(self) -> dict[str, str]:
        """Commit metadata (Delta) or snapshot summary properties (Iceberg): strings only. The windows are
        the state log segment, compressed: a slab's parameter ids mostly share a few (start, end)."""
        packed = base64.b64encode(zlib.compress(segment(self.windows), 6)).decode()
        return {APP: self.app, VERSION: str(self.version), RUN: self.run, WINDOWS: packed}

    @classmethod
    def parse(cls, properties: dict) -> Checkpoint | None:
        """From a commit's metadata; None for a commit that is not an etl slab's (compaction, others)."""
        if APP not in properties or WINDOWS not in properties:
            return None
        windows = windows_of(zlib.decompress(base64.b64decode(properties[WINDOWS])))
        return cls(str(properties[APP]), int(properties[VERSION]), str(properties.get(RUN, "")), windows)


@dataclass(frozen=True)
class Replace:
    """The rows a commit replaces: `time_key` in [start, end) for the listed parameters, per group (a
    slab's windows mostly share their bounds); or, with `source` alone, every row of one source (a
    dimension table's snapshot)."""

    time_key: str = "ts"
    groups: tuple[tuple[int, int, tuple[int, ...]], ...] = ()
    source: str | None = None

    @classmethod
    def of(cls, windows: Windows, time_key: str = "ts") -> Replace:
        groups: dict[tuple[int, int], set[int]] = {}
        for p, a, b in zip(
            windows.param_id.tolist(), windows.start.tolist(), windows.end.tolist(), strict=True
        ):
            groups.setdefault((a, b), set()).add(p)
        return cls(time_key, tuple((a, b, tuple(sorted(p))) for (a, b), p in sorted(groups.items())))


def with_date(table: pa.Table, time_key: str) -> pa.Table:
    """Timestamps in microseconds, and the `date` column (UTC) that partitions a table and that the
    Hive-partitioned datasets carry in their folder names."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type != TS_US:
            table = table.set_column(i, field.name, table.column(i).cast(TS_US))
    day = pc.cast(table.column(time_key), pa.timestamp("us")).cast(pa.date32())
    return table.append_column("date", day) if "date" not in table.column_names else table


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def table_lock(uri: str) -> threading.Lock:
    """One commit at a time per table within a process (slabs run concurrently): our version counter
    must go up by one per commit. Two processes are kept apart by the run lock, and the table's own
    optimistic concurrency refuses a commit made on a stale version."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(uri, threading.Lock())


class LakeTable(ABC):
    """One table of a lake: a series, the quality dataset or a dimension table."""

    kind: ClassVar[str]

    def __init__(self, name: str, partition_by: tuple[str, ...], time_key: str | None) -> None:
        self.name = name
        self.partition_by = partition_by  # columns (delta) or identity fields besides day(time_key) (iceberg)
        self.time_key = time_key
        self._version: dict[str, int] = {}

    @property
    @abstractmethod
    def uri(self) -> str: ...

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def _commit(
        self, rows: pa.Table | pa.RecordBatchReader, replace: Replace, properties: dict[str, str]
    ) -> None:
        """Delete what `replace` matches and append `rows`, in one commit carrying `properties`."""

    @abstractmethod
    def history(self, app: str, after: int) -> list[Checkpoint]:
        """Our app's checkpoints of version > after, oldest first (newest commits are read first, and
        reading stops at the first one of ours at or below `after`)."""

    @abstractmethod
    def dataset(self) -> ds.Dataset:
        """The current snapshot's rows, lazily (a reader sees one committed version, never a partial one)."""

    @abstractmethod
    def compact(self) -> int:
        """Bin-pack small files; the number of files rewritten."""

    @abstractmethod
    def vacuum(self, retain_ms: int) -> int:
        """Expire versions older than `retain_ms` and delete the files only they reference; the count."""

    def latest(self, app: str) -> int:
        """The version of our app's last commit in the table (0: none)."""
        found = self.history(app, 0)
        return found[-1].version if found else 0

    def replace(
        self,
        rows: pa.Table | pa.RecordBatchReader,
        replace: Replace,
        checkpoint: tuple[str, str, Windows] | None = None,
    ) -> int | None:
        """One commit; with a checkpoint (app, run, windows) it gets the app's next version, returned."""
        with table_lock(self.uri):
            if checkpoint is None:
                self._commit(rows, replace, {})
                return None
            app, run, windows = checkpoint
            if app not in self._version:
                self._version[app] = self.latest(app) if self.exists() else 0
            version = self._version[app] + 1
            self._commit(rows, replace, Checkpoint(app, version, run, windows).properties())
            self._version[app] = version
            return version

    def read(self, params: list[int], start: int, end: int) -> pa.Table:
        """Rows of these parameters with time_key in [start, end) (the rows a quality row is made of)."""
        if not self.exists():
            return pa.table({})
        key = pc.field(self.time_key)
        low, high = pa.scalar(start * 1000, TS_US), pa.scalar(end * 1000, TS_US)
        where = pc.field("param_id").isin(params) & (key >= low) & (key < high)
        return self.dataset().to_table(filter=where)
