"""What Delta Lake and Iceberg tables share here: the checkpoint a commit carries, the rows a commit
replaces, the upkeep policy, and the interface the committer, the recovery and the readers use.

A commit replaces exactly the (parameter, window) ranges its slabs fetched: one transaction removes the
rows matching `Replace` and adds the fetched rows. When no stored file can hold such a row (the
windows are beyond every stored row, or their days are new) the commit is a plain append; otherwise
only the files whose partition and statistics say they may hold one are looked at. The same commit
carries the group's `Checkpoint` (docs/lake.md): which run of which app made it, a per-(table, app)
version counting our commits, and the windows in the state log's own encoding, so the checkpoints can
be rebuilt from the table alone.

One object per table per run (`Lake` caches them): it keeps the table's handle (a loaded Delta log or
Iceberg metadata) from one commit to the next, so a commit reads nothing that grows with the table's
history, and refreshes it only when another writer got in between.
"""

from __future__ import annotations

import base64
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from etl.model import Windows
from etl.state.arrivals import Arrivals
from etl.state.store import arrivals_of, segment, windows_of
from etl.timeutil import DAY_MS

# Both formats keep timestamps in microseconds (Delta's TIMESTAMP, Iceberg's timestamptz).
TS_US = pa.timestamp("us", tz="UTC")
APP, VERSION, RUN, WINDOWS = "etl.app", "etl.version", "etl.run", "etl.windows"
MANY_FILES = 8  # a day partition with more small files than this is compacted even before its day ends
SMALL_FILE = 32 * 2**20  # bytes: files under this are worth merging
COMPACT_BYTES = 256 * 2**20  # bytes of small files merged per partition at most (their rows are held)


def missing_columns(have: Sequence[str], schema: pa.Schema) -> pa.Schema | None:
    """The fields of `schema` a table made by an older version lacks (None: none): added, nullable,
    before rows that carry them are committed (older rows read as null there)."""
    missing = [f.with_nullable(True) for f in schema if f.name not in set(have)]
    return pa.schema(missing) if missing else None


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint of the slabs one commit holds, as it rides in that commit."""

    app: str  # etl-{source}[-s{I}of{N}]: one writer's commits, whatever other writers add to the table
    version: int  # 1, 2, ... per (table, app): the state log records the last one it holds
    run: str
    windows: Windows
    arrivals: Arrivals | None = None  # what arrived in the windows

    def properties(self) -> dict[str, str]:
        """Commit metadata (Delta) or snapshot summary properties (Iceberg): strings only. The windows and
        what arrived in them are the state log segment, compressed: a group's parameter ids mostly share a
        few (start, end)."""
        packed = base64.b64encode(zlib.compress(segment(self.windows, arrivals=self.arrivals), 6)).decode()
        return {APP: self.app, VERSION: str(self.version), RUN: self.run, WINDOWS: packed}

    @classmethod
    def parse(cls, properties: Mapping[str, Any]) -> Checkpoint | None:
        """From a commit's metadata; None for a commit that is not an etl slab's (compaction, others)."""
        if APP not in properties or WINDOWS not in properties:
            return None
        data = zlib.decompress(base64.b64decode(properties[WINDOWS]))
        return cls(
            str(properties[APP]),
            int(properties[VERSION]),
            str(properties.get(RUN, "")),
            windows_of(data),
            arrivals_of(data),
        )


@dataclass(frozen=True)
class Replace:
    """The rows a commit replaces, all of one source: a table holds every source (instance of the
    platform) written into it, with the same parameter ids, and a source's commit never touches
    another's rows. `time_key` in [start, end) for the listed parameters, per group (a slab's windows
    mostly share their bounds); or, with `groups` None, every row of the source (a dimension table's
    snapshot)."""

    source: str
    time_key: str = "ts"
    groups: tuple[tuple[int, int, tuple[int, ...]], ...] | None = None

    @classmethod
    def of(cls, source: str, windows: Windows, time_key: str = "ts") -> Replace:
        groups: dict[tuple[int, int], set[int]] = {}
        for p, a, b in zip(
            windows.param_id.tolist(), windows.start.tolist(), windows.end.tolist(), strict=True
        ):
            groups.setdefault((a, b), set()).add(p)
        return cls(source, time_key, tuple((a, b, tuple(sorted(p))) for (a, b), p in sorted(groups.items())))

    def matches(self, rows: pa.Table) -> np.ndarray:
        """True for the rows it replaces."""
        mine = pc.equal(rows.column("source"), self.source).fill_null(False)
        mask = np.asarray(mine.to_numpy(zero_copy_only=False), bool)
        if self.groups is None or not rows.num_rows:
            return mask
        key = rows.column(self.time_key).cast(TS_US).cast(pa.int64()).to_numpy(zero_copy_only=False) // 1000
        pids = rows.column("param_id").to_numpy(zero_copy_only=False)
        ranges = np.zeros(rows.num_rows, bool)
        for a, b, ids in self.groups:
            ranges |= (key >= a) & (key < b) & np.isin(pids, np.asarray(ids, np.int64))
        return mask & ranges

    def may_match(
        self,
        min_key: np.ndarray,
        max_key: np.ndarray,
        min_pid: np.ndarray,
        max_pid: np.ndarray,
        min_source: pa.Array,
        max_source: pa.Array,
    ) -> np.ndarray:
        """Per file, from its statistics (epoch ms and parameter ids, NaN where unknown; the bounds of
        its `source` column, null where unknown): may it hold a row this replaces? Unknown statistics
        answer yes."""
        hit = np.asarray(
            pc.and_kleene(pc.less_equal(min_source, self.source), pc.greater_equal(max_source, self.source))
            .fill_null(True)
            .to_numpy(zero_copy_only=False),
            bool,
        )
        if self.groups is None:
            return hit
        ranges = np.zeros(len(min_key), bool)
        for a, b, ids in self.groups:
            low, high = min(ids), max(ids)
            ranges |= ~((max_key < a) | (min_key >= b) | (max_pid < low) | (min_pid > high))
        return hit & ranges


def only_of(source: str, low: str | None, high: str | None) -> bool:
    """Do a file's bounds of its `source` column say that it holds rows of `source` alone? Bounds cut
    short, as formats keep a long name's (the low one a prefix of it, the high one that prefix raised
    at its last character), count as its own; no bounds, or a range another source falls in, do not."""
    if low is None or high is None:
        return False
    if low == high == source:
        return True
    cut = 0 < len(low) < len(source) and source.startswith(low)
    return cut and high == low[:-1] + chr(ord(low[-1]) + 1)


@dataclass(frozen=True)
class Policy:
    """A table's upkeep (sink.retention, sink.versions, sink.compact)."""

    retention_ms: int | None = 7 * DAY_MS  # None: old versions and their files are kept
    versions: int = 50
    compact: int = 4  # day partitions compacted per run at most
    files: int = (
        1  # small files a day that is over keeps uncompacted (sink.buckets: a backfill writes one a bucket)
    )

    @property
    def slack(self) -> int:
        """Versions let past `versions` before they are expired together (cleanup reads the rest)."""
        return max(2, self.versions // 4)


@dataclass
class Upkeep:
    """What a table's maintenance did."""

    compacted: int = 0  # day partitions compacted
    files_rewritten: int = 0  # small files merged away
    versions_expired: int = 0
    files_deleted: int = 0  # files no kept version references, older than the retention

    def add(self, other: Upkeep) -> None:
        for name in ("compacted", "files_rewritten", "versions_expired", "files_deleted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class DayFiles:
    """The data files of one day partition of the current version (with identity partitions of
    `object_id`, one entry per (day, object))."""

    day: int  # days since the epoch
    key: tuple[object, ...] = ()  # the partition, as the format names it
    files: int = 0
    small: int = 0  # of them under SMALL_FILE
    small_bytes: int = 0


def to_compact(days: list[DayFiles], horizon: int | None, limit: int | None, keep: int = 1) -> list[DayFiles]:
    """The partitions worth compacting, newest first: a day that is over (before `horizon`, epoch ms)
    with more than `keep` small files, or any day with more than MANY_FILES of them; at most `limit`.
    `horizon` None: every day with several small files (etl compact)."""
    picked = [
        d
        for d in days
        if d.small > 1
        and (horizon is None or ((d.day + 1) * DAY_MS <= horizon and d.small > keep) or d.small > MANY_FILES)
    ]
    picked.sort(key=lambda d: d.day, reverse=True)
    return picked if limit is None else picked[:limit]


def to_merge(sizes: Sequence[int]) -> list[int]:
    """Which of a partition's small files (their sizes) one compaction merges: smallest first, up to
    COMPACT_BYTES (their rows may be held at once), at least two; none when fewer are there."""
    picked: list[int] = []
    total = 0
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        if total + sizes[i] > COMPACT_BYTES and len(picked) > 1:
            break
        picked.append(i)
        total += sizes[i]
    return picked if len(picked) > 1 else []


def same_rows(stored: pa.Table, rows: pa.Table) -> bool:
    """Do two tables hold the same rows, whatever their order and the stored column types?"""
    if stored.num_rows != rows.num_rows or set(stored.column_names) != set(rows.column_names):
        return False
    try:
        rows = rows.select(stored.column_names).cast(stored.schema)
        nested = (pa.types.is_nested, pa.types.is_dictionary)
        keys = [(f.name, "ascending") for f in stored.schema if not any(test(f.type) for test in nested)]
        return cast(bool, stored.sort_by(keys).equals(rows.sort_by(keys)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False


def with_date(table: pa.Table, time_key: str) -> pa.Table:
    """Timestamps in microseconds, and the `date` column (UTC) that partitions a table and that the
    Hive-partitioned datasets carry in their folder names."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type != TS_US:
            table = table.set_column(i, f.name, table.column(i).cast(TS_US))
    day = pc.cast(table.column(time_key), pa.timestamp("us")).cast(pa.date32())
    return table.append_column("date", day) if "date" not in table.column_names else table


_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def table_lock(uri: str) -> threading.RLock:
    """One commit at a time per table within a process: our version counter goes up by one per
    commit, and the table's handle is not shared by two commits. Two processes are kept apart by the
    run lock, and the table's own optimistic concurrency refuses a commit made on a stale version."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(uri, threading.RLock())


@dataclass(frozen=True)
class Change:
    """What one commit does: remove the rows `replace` matches, add `rows` (and `files`, data files
    already written into the table), carry `checkpoint`. `ready` is called (and may raise) just before the
    commit becomes visible: what must be visible first."""

    rows: pa.Table | None
    replace: Replace | None
    checkpoint: Checkpoint | None = None
    files: Sequence[Any] = ()
    ready: Callable[[], object] | None = None


@dataclass
class Committed:
    """A commit made: our app's version (None without a checkpoint) and the data files it added."""

    version: int | None
    files: list[str] = field(default_factory=list)


class LakeTable(ABC):
    """One table of a lake: a series, the quality dataset or a dimension table."""

    kind: ClassVar[str]

    def __init__(
        self, name: str, partition_by: tuple[str, ...], time_key: str | None, policy: Policy
    ) -> None:
        self.name = name
        self.partition_by = partition_by  # columns (delta) or identity fields besides day(time_key) (iceberg)
        self.time_key = time_key
        self.policy = policy
        self._version: dict[str, int] = {}
        self._read_lock = threading.Lock()
        self._reader: Any = None

    @property
    @abstractmethod
    def uri(self) -> str: ...

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def _commit(self, change: Change) -> list[str]:
        """The change, in one commit; the data files it added."""

    @abstractmethod
    def prepare(self, schema: pa.Schema) -> None:
        """Make the table, empty, if it is missing (Dask workers write files into existing tables)."""

    @abstractmethod
    def write_files(self, rows: pa.Table) -> list[Any]:
        """The rows as data files of the table, outside any commit, for `commit(files=...)` to add: the
        format's own records of them (Iceberg's `DataFile`s, Delta's add actions), picklable. No reader
        sees the files until a commit names them; random names, so a task redone never writes one twice."""

    def holds_none_of(self, replace: Replace) -> bool:
        """Can no data file of the table hold a row `replace` covers? Then a large slab's data files are
        written when it ends, overlapping the fetching, rather than by its group's commit. Only the file
        layout rides on the answer: the commit replaces what it must either way. Default: unknown (no)."""
        return False

    @abstractmethod
    def history(self, app: str, after: int) -> list[Checkpoint]:
        """Our app's checkpoints of version > after that the table still holds, oldest first."""

    @abstractmethod
    def latest(self, app: str) -> int:
        """The version of our app's last commit in the table (0: none); kept whatever expires."""

    @abstractmethod
    def dataset(self) -> ds.Dataset:
        """The current version's rows, lazily (a reader sees one committed version, never a partial one)."""

    def rows(
        self, source: str, start: int | None = None, end: int | None = None, params: list[int] | None = None
    ) -> ds.Dataset:
        """What a reader asks for: at least the source's rows of these parameters with time_key in
        [start, end) (None: no bound), maybe more. Default: the current version's dataset, which DuckDB
        scans lazily with the reader's filters; a table that must read its rows eagerly reads these."""
        return self.dataset()

    @abstractmethod
    def _read(self, source: str, params: list[int], start: int, end: int) -> pa.Table:
        """Rows of the source's parameters with time_key in [start, end) in the run's read snapshot."""

    @abstractmethod
    def day_files(self, source: str | None = None) -> list[DayFiles]:
        """The data files of each day partition of the current version; with `source`, only the files
        holding that source's rows alone (`only_of`)."""

    @abstractmethod
    def _compact(self, days: list[DayFiles], source: str) -> int:
        """Merge the small files of these partitions that hold the source's rows alone, in one commit;
        the files merged away."""

    @abstractmethod
    def _refresh(self) -> None:
        """The table's handle brought to its current version: other writers (another source's runs) may
        have committed since it was loaded, compacted, or expired the version it holds."""

    @abstractmethod
    def _expire(self, retention_ms: int | None, versions: int, now: bool = False) -> int:
        """Forget versions beyond the newest `versions` or older than the retention (the current one
        stays), with the log or metadata files only they needed, once `policy.slack` of them add up
        (`now`: whatever their number); how many."""

    @abstractmethod
    def _sweep(self, retention_ms: int) -> int:
        """Delete data files no kept version references, older than the retention; how many."""

    # -- committing ------------------------------------------------------------------------------

    def commit(
        self,
        rows: pa.Table | None,
        replace: Replace | None,
        checkpoint: tuple[str, str, Windows] | None = None,
        files: Sequence[Any] = (),
        ready: Callable[[], object] | None = None,
        arrivals: Arrivals | None = None,
    ) -> Committed:
        """One commit; with a checkpoint (app, run, windows) it gets the app's next version, and carries
        `arrivals`. `ready`: waited for just before the commit becomes visible (its files may be written
        meanwhile)."""
        with table_lock(self.uri):
            if checkpoint is None:
                return Committed(None, self._commit(Change(rows, replace, None, files, ready)))
            app, run, windows = checkpoint
            if app not in self._version:
                self._version[app] = self.latest(app) if self.exists() else 0
            version = self._version[app] + 1
            carried = Checkpoint(app, version, run, windows, arrivals)
            added = self._commit(Change(rows, replace, carried, files, ready))
            self._version[app] = version
            return Committed(version, added)

    def replace(self, rows: pa.Table | pa.RecordBatchReader, replace: Replace) -> list[str]:
        """Rows that replace what `replace` matches, without a checkpoint."""
        table = rows.read_all() if isinstance(rows, pa.RecordBatchReader) else rows
        return self.commit(table, replace).files

    def snapshot(self, rows: pa.Table | pa.RecordBatchReader, source: str) -> bool:
        """A dimension table's rows of `source` replaced by these, unless they hold them already (an
        hourly run would otherwise add a version per reference table that changes nothing); True if
        committed."""
        table = rows.read_all() if isinstance(rows, pa.RecordBatchReader) else rows
        with table_lock(self.uri):
            if self.exists() and same_rows(self._rows_of(source), table):
                return False
            self.commit(table, Replace(source=source))
        return True

    def _rows_of(self, source: str) -> pa.Table:
        """The current version's rows of one source (a dimension table's)."""
        return self.dataset().to_table(filter=pc.field("source") == source)

    # -- reading ---------------------------------------------------------------------------------------

    def read(self, source: str, params: list[int], start: int, end: int) -> pa.Table:
        """The source's rows of these parameters with time_key in [start, end) (the rows a quality row
        is made of), from one snapshot per run: a run's slabs never share a (parameter, day), so the
        rows outside a slab's windows were all committed before the run began (another source's commits
        meanwhile hold none of them)."""
        if not self.exists():
            return pa.table({})
        return self._read(source, params, start, end)

    def files_per_day(self) -> dict[str, int]:
        """Data files of each day partition ('YYYY-MM-DD') of the current version."""
        counts: dict[str, int] = {}
        for d in self.day_files():
            label = str(np.datetime64(d.day, "D"))
            counts[label] = counts.get(label, 0) + d.files
        return counts

    # -- upkeep ----------------------------------------------------------------------------------------

    def maintain(self, horizon: int, sweep: bool, source: str) -> Upkeep:
        """A run's upkeep, bounded: compact at most `policy.compact` partitions (days that are over, or
        with too many small files) of the source's files, expire old versions, and with `sweep` delete
        the files no kept version references once older than the retention. Readers of the current
        version, or of any version younger than the retention, keep working."""
        out = Upkeep()
        if not self.exists():
            return out
        with table_lock(self.uri):
            self._refresh()
            if self.time_key and self.policy.compact:
                days = to_compact(self.day_files(source), horizon, self.policy.compact, self.policy.files)
                if days:
                    out.files_rewritten = self._compact(days, source)
                    out.compacted = len(days)
            out.versions_expired = self._expire(self.policy.retention_ms, self.policy.versions)
            if sweep and self.policy.retention_ms is not None:
                out.files_deleted = self._sweep(self.policy.retention_ms)
        return out

    def compact(self, source: str) -> int:
        """etl compact: the source's small files merged in every partition; the files merged away."""
        if not self.exists() or not self.time_key:
            return 0
        with table_lock(self.uri):
            self._refresh()
            days = to_compact(self.day_files(source), None, None)
            return self._compact(days, source) if days else 0

    def vacuum(self, retain_ms: int) -> int:
        """etl vacuum: versions older than `retain_ms` expired, then the files only they needed deleted."""
        if not self.exists():
            return 0
        with table_lock(self.uri):
            self._refresh()
            self._expire(retain_ms, self.policy.versions, now=True)
            return self._sweep(retain_ms)
