"""Delta Lake tables through delta-rs (`deltalake`): `{sink.path}/{series}`, `{sink.path}/quality` and
`{sink.path}/dimensions/{name}`.

A commit is one log entry. When a group's windows may have rows in the table (some file's partition
and statistics overlap them), `write_deltalake(mode="overwrite", predicate=...)` removes them (rewriting
only the files that hold some) and adds the new files in that entry; otherwise the rows are appended
(`mode="append"`, a blind append nothing is planned for). Files written elsewhere (by Dask workers) are
committed with `create_write_transaction`. The checkpoint is the entry's commit metadata (`commitInfo`),
and `etl.app`/`etl.version` are also an application transaction (`txn`), which Delta keeps in every
snapshot and checkpoint: `transaction_version(app)` reads our last version whatever was cleaned up.
On S3 delta-rs commits with a conditional PUT of the log entry (`conditional_put: etag`), so two
writers never both win one version.

The log does not grow with history: delta-rs writes a checkpoint every CHECKPOINT_EVERY versions, so
loading reads the last checkpoint and at most that many entries, and the run's upkeep deletes entries
the current version does not need once beyond the newest `sink.versions` or older than the retention.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from etl.errors import StorageError
from etl.sinks.lake.common import (
    APP,
    CONFLICT_ATTEMPTS,
    SMALL_FILE,
    TS_US,
    VERSION,
    Checkpoint,
    DayFiles,
    LakeTable,
    Policy,
    Replace,
    missing_columns,
    only_of,
    to_merge,
)
from etl.sinks.lake.delta_files import merge_parts, partition_text, write_files, write_part
from etl.storage.atomic import Storage
from etl.support.optional import require

if TYPE_CHECKING:  # deltalake loads for Delta tables only
    from deltalake import CommitProperties
    from deltalake import DeltaTable as Handle  # delta-rs's; this module's DeltaTable is etl's LakeTable
    from deltalake.transaction import AddAction, RemoveAction

    Action = AddAction | RemoveAction

CHECKPOINT_EVERY = 10  # versions between two log checkpoints: what a load replays at most
LOG_ENTRY = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet|crc)$")
NEVER_MS = 100 * 365 * 86_400_000  # retention "off": a duration Delta accepts


def delta_options(storage: Storage) -> dict[str, str]:
    """delta-rs's storage options from the sink's: its object store reads AWS_* itself; the endpoint of
    an S3-compatible store, plain http for one on loopback, and the safe commit are said here."""
    if storage.local:
        return {}
    options: dict[str, Any] = {"conditional_put": "etag"}  # commits are PUT-if-absent: no unsafe rename
    endpoint = storage.options.get("endpoint_url") or storage.options.get("client_kwargs", {}).get(
        "endpoint_url"
    )
    if endpoint:
        options["aws_endpoint_url"] = endpoint
        if str(endpoint).startswith("http://"):
            options["aws_allow_http"] = "true"
    for ours, theirs in (
        ("key", "aws_access_key_id"),
        ("secret", "aws_secret_access_key"),
        ("token", "aws_session_token"),
    ):
        if storage.options.get(ours):
            options[theirs] = storage.options[ours]
    region = storage.options.get("client_kwargs", {}).get("region_name") or os.environ.get(
        "AWS_DEFAULT_REGION"
    )
    if region:
        options.setdefault("aws_region", region)
    return {k: str(v) for k, v in options.items()}


def _sql_time(ms: int) -> str:
    return "'" + datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "'"


def _sql_date(ms: int) -> str:
    return "'" + datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d") + "'"


def predicate(replace: Replace) -> str:
    """delta-rs's SQL predicate, of the replace's source alone: the `date` bounds let it skip every other
    partition's files, the source's bounds every other source's files."""
    source = "source = '" + replace.source.replace("'", "''") + "'"
    if replace.groups is None:
        return source
    key = replace.time_key
    ranges = " OR ".join(
        f"(date >= {_sql_date(a)} AND date <= {_sql_date(b - 1)} AND {key} >= {_sql_time(a)} AND {key} < {_sql_time(b)}"
        f" AND param_id IN ({','.join(map(str, ids))}))"
        for a, b, ids in replace.groups
    )
    return f"{source} AND ({ranges})" if ranges else "false"


def _interval(ms: int | None) -> str:
    return f"interval {max(0, (NEVER_MS if ms is None else ms)) // 1000} seconds"


def _numbers(column: Any, unit_ms: int = 1) -> np.ndarray:
    """A statistics column as float64 (NaN where unknown): timestamps in epoch ms."""
    array = pa.array(column) if not isinstance(column, pa.ChunkedArray | pa.Array) else column
    if pa.types.is_timestamp(array.type):
        array = array.cast(TS_US).cast(pa.int64())
        return np.asarray(pc.divide(array.cast(pa.float64()), 1000.0).to_numpy(zero_copy_only=False), float)
    return np.asarray(array.cast(pa.float64()).to_numpy(zero_copy_only=False), float) * unit_ms


def _lost_race(dl: Any, exc: Exception) -> bool:
    """Did a commit fail only because another writer got in first? Either it took the version
    (CommitFailedError), or, while the commit was checked against the versions made since its own, the
    other writer's upkeep had deleted that version's log entry (delta-rs then names the version
    invalid). Nothing of ours was committed in either case: planning again is safe."""
    return isinstance(exc, dl.exceptions.CommitFailedError) or str(exc).startswith("Invalid table version")


def _paths(dt: Handle) -> set[str]:
    """The data files of the loaded version, relative to the table."""
    return set(pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist())


def _sources(actions: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Each add action's bounds of the `source` column (its partition value when the table is partitioned
    by source; null where unknown)."""
    for low, high in (("partition.source", "partition.source"), ("min.source", "max.source")):
        if low in actions.column_names and high in actions.column_names:
            return (
                actions.column(low).combine_chunks().cast(pa.string()),
                actions.column(high).combine_chunks().cast(pa.string()),
            )
    unknown = pa.nulls(actions.num_rows, pa.string())
    return unknown, unknown


def _may_hold(dt: Handle, replace: Replace) -> tuple[pa.Table, np.ndarray]:
    """The loaded version's add actions, and for each whether its file may hold a row `replace` removes:
    from the log's statistics (`Replace.may_match`), without reading a data file."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    key = replace.time_key

    def stat(name: str) -> np.ndarray:
        if name not in actions.column_names:
            return np.full(actions.num_rows, np.nan)
        return _numbers(actions.column(name))

    hit = replace.may_match(
        stat(f"min.{key}"),
        stat(f"max.{key}"),
        stat("min.param_id"),
        stat("max.param_id"),
        *_sources(actions),
    )
    return actions, hit


class DeltaTable(LakeTable):
    kind: ClassVar[str] = "delta"

    def __init__(
        self, storage: Storage, rel: str, partition_by: tuple[str, ...], time_key: str | None, policy: Policy
    ) -> None:
        super().__init__(rel, partition_by, time_key, policy)
        self.deltalake = require("deltalake", "sink.format delta")
        self.storage, self.rel = storage, rel
        self.options = delta_options(storage)
        self._exists = False
        self._dt: Handle | None = None  # the handle, kept from one commit to the next

    @property
    def uri(self) -> str:
        return self.storage.display(self.rel) if not self.storage.local else self.storage.full(self.rel)

    def _open(self) -> Handle:
        # Twice: another source's upkeep may delete the checkpoint `_last_checkpoint` named while the
        # table loads; the second load finds the newer one.
        error: Exception | None = None
        for _ in range(2):
            try:
                opened: Handle = self.deltalake.DeltaTable(self.uri, storage_options=self.options)
                return opened
            except Exception as exc:  # noqa: BLE001 - delta-rs raises its own classes, and OSError
                error = exc
                if isinstance(exc, self.deltalake.exceptions.TableNotFoundError):
                    break
        raise StorageError(f"cannot open the Delta table {self.uri}: {str(error).splitlines()[0]}") from None

    def _handle(self) -> Handle:
        if self._dt is None:
            self._dt = self._open()
            self._configure(self._dt)
        return self._dt

    def configuration(self) -> dict[str, str]:
        """Table properties: a checkpoint every CHECKPOINT_EVERY versions; the retention as Delta's own
        (for other tools' vacuum); log cleanup is ours (it also keeps at most `sink.versions`)."""
        retention = _interval(self.policy.retention_ms)
        return {
            "delta.checkpointInterval": str(CHECKPOINT_EVERY),
            "delta.logRetentionDuration": retention,
            "delta.deletedFileRetentionDuration": retention,
            "delta.enableExpiredLogCleanup": "false",
        }

    def _configure(self, dt: Handle) -> None:
        """A table made by an older version, or under another retention, gets these properties once."""
        want = self.configuration()
        have = dt.metadata().configuration
        if any(have.get(k) != v for k, v in want.items()):
            with contextlib.suppress(Exception):  # best effort: the table works without them
                dt.alter.set_table_properties(want, raise_if_not_exists=False)

    def exists(self) -> bool:
        # Asked once until true: delta-rs holds the GIL through this call's requests, which would stall
        # the run's event loop on every commit to an object store.
        if not self._exists:
            self._exists = self.deltalake.DeltaTable.is_deltatable(self.uri, storage_options=self.options)
        return self._exists

    # -- committing --------------------------------------------------------------------------------

    def _properties(self, checkpoint: Checkpoint | None) -> CommitProperties:
        dl = self.deltalake
        if checkpoint is None:
            empty: CommitProperties = dl.CommitProperties()
            return empty
        properties = checkpoint.properties()
        made: CommitProperties = dl.CommitProperties(
            custom_metadata=properties,
            app_transactions=[dl.Transaction(properties[APP], int(properties[VERSION]))],
        )
        return made

    def _commit(
        self,
        rows: pa.Table | None,
        files: Sequence[Any],
        replace: Replace | None,
        checkpoint: Checkpoint | None,
        ready: Callable[[], object] | None = None,
    ) -> list[str]:
        dl = self.deltalake
        if ready is not None:  # delta-rs writes and commits in one call: nothing to overlap
            ready()
        try:
            if not self.exists():
                return self._create(rows, checkpoint)
            if rows is not None:
                self._add_columns(rows.schema)
            for attempt in range(CONFLICT_ATTEMPTS):
                self._refresh()  # planned on the newest version: another source's run may have moved on
                dt = self._handle()
                before = _paths(dt)
                try:
                    touched = replace is not None and self._touched(dt, replace)
                    if files:
                        actions = list(files) + (self._rewrite(dt, replace) if touched and replace else [])
                        self._transact(dt, actions, self._properties(checkpoint))
                    else:
                        assert rows is not None
                        dl.write_deltalake(
                            dt,
                            rows,
                            mode="overwrite" if touched else "append",
                            predicate=predicate(replace) if touched and replace else None,
                            writer_properties=dl.WriterProperties(compression="ZSTD"),
                            commit_properties=self._properties(checkpoint),
                        )
                except dl.exceptions.DeltaError as exc:
                    if not _lost_race(dl, exc) or attempt == CONFLICT_ATTEMPTS - 1:
                        raise
                    continue  # another writer got in between: plan again on its version
                return sorted(_paths(dt) - before)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - one line, the table named; never a traceback
            raise StorageError(
                f"cannot commit to the Delta table {self.uri}: {str(exc).splitlines()[0]}"
            ) from None
        return []

    def _transact(self, dt: Handle, actions: list[Action], properties: CommitProperties) -> None:
        """Add actions of data files already written (and remove actions of stored ones) in one log
        entry; the handle then reads that entry, which delta-rs leaves it without: the next commit's
        plan, the files reported and the sweep need the version just made."""
        dt.create_write_transaction(
            actions,
            mode="append",
            schema=dt.schema(),
            partition_by=list(self.partition_by) or None,
            commit_properties=properties,
        )
        dt.update_incremental()

    def _create(self, rows: pa.Table | None, checkpoint: Checkpoint | None) -> list[str]:
        dl = self.deltalake
        if rows is None:
            raise StorageError(f"the Delta table {self.uri} is missing (it is made before workers write)")
        dl.write_deltalake(
            self.uri,
            rows,
            mode="append",
            partition_by=list(self.partition_by) or None,
            configuration=self.configuration(),
            storage_options=self.options,
            writer_properties=dl.WriterProperties(compression="ZSTD"),
            commit_properties=self._properties(checkpoint),
        )
        self._exists = True
        return sorted(_paths(self._handle()))

    def _add_columns(self, schema: pa.Schema) -> None:
        for attempt in range(CONFLICT_ATTEMPTS):
            dt = self._handle()
            missing = missing_columns(dt.schema().to_arrow().names, schema)
            if missing is None:
                return
            try:
                dt.alter.add_columns(list(self.deltalake.Schema.from_arrow(missing).fields))
                return
            except self.deltalake.exceptions.DeltaError as exc:
                if not _lost_race(self.deltalake, exc) or attempt == CONFLICT_ATTEMPTS - 1:
                    raise
                self._refresh()  # another writer (another source's run) changed the table first

    def prepare(self, schema: pa.Schema) -> None:
        if self.exists():
            self._add_columns(schema)
        if not self.exists():
            with contextlib.suppress(self.deltalake.exceptions.DeltaError):  # made meanwhile: fine
                self.deltalake.DeltaTable.create(
                    self.uri,
                    schema,
                    mode="ignore",
                    partition_by=list(self.partition_by) or None,
                    configuration=self.configuration(),
                    storage_options=self.options,
                )
            self._exists = True

    def write_files(self, rows: pa.Table) -> list[AddAction]:
        return write_files(self.storage, self.rel, self.partition_by, rows)

    def _touched(self, dt: Handle, replace: Replace) -> bool:
        """May a file of the current version hold a row `replace` removes? New windows beyond every
        stored row append blindly."""
        return bool(_may_hold(dt, replace)[1].any())

    def _rewrite(self, dt: Handle, replace: Replace) -> list[Action]:
        """Files of Dask workers replacing stored rows: the stored files that hold some are rewritten
        without them (a remove action for each, and the add action of its rewrite without those rows,
        none when nothing else is left)."""
        from deltalake.transaction import RemoveAction

        actions, hit = _may_hold(dt, replace)
        parts = [c for c in actions.column_names if c.startswith("partition.")]
        out: list[Action] = []
        now = int(time.time() * 1000)
        for i in np.flatnonzero(hit).tolist():
            rel = actions.column("path")[i].as_py()
            partition: dict[str, str | None] = {
                c.removeprefix("partition."): partition_text(actions.column(c)[i].as_py()) for c in parts
            }
            with self.storage.fs.open(self.storage.full(f"{self.rel}/{rel}"), "rb") as source:
                stored = pq.read_table(source)
            probe = stored
            if "source" in partition:  # a partition column: in the file's path, not in its rows
                probe = stored.append_column("source", pa.array([partition["source"]] * stored.num_rows))
            removed = replace.matches(probe)
            if not removed.any():
                continue
            size = int(actions.column("size_bytes")[i].as_py())
            out.append(RemoveAction(rel, True, now, size, partition))
            if not removed.all():
                out.append(write_part(self.storage, self.rel, stored.filter(pa.array(~removed)), partition))
        return out

    # -- checkpoints -------------------------------------------------------------------------------

    def latest(self, app: str) -> int:
        # The application transaction is part of the table's snapshot: no need to read the history.
        if not self.exists():
            return 0
        return self._handle().transaction_version(app) or 0

    def history(self, app: str, after: int) -> list[Checkpoint]:
        found = []
        for commit in self._open().history():  # newest first, as far as the log still goes
            checkpoint = Checkpoint.parse(commit)
            if checkpoint is None or checkpoint.app != app:
                continue
            if checkpoint.version <= after:
                break
            found.append(checkpoint)
        return found[::-1]

    # -- reading -----------------------------------------------------------------------------------

    def dataset(self) -> ds.Dataset:
        return self._open().to_pyarrow_dataset()

    def _rows_of(self, source: str) -> pa.Table:
        return self._handle().to_pyarrow_dataset().to_table(filter=pc.field("source") == source)

    def _read(self, source: str, params: list[int], start: int, end: int) -> pa.Table:
        with self._read_lock:
            if self._reader is None:
                self._reader = self._open().to_pyarrow_dataset()
            dataset = self._reader
        assert self.time_key is not None
        key = pc.field(self.time_key)
        where = (
            (pc.field("source") == source)
            & pc.field("param_id").isin(params)
            & (key >= pa.scalar(start * 1000, TS_US))
            & (key < pa.scalar(end * 1000, TS_US))
        )
        if "date" in self.partition_by:  # lets the dataset skip other days' files
            days = pa.array([start // 86_400_000, (end - 1) // 86_400_000], pa.int32()).cast(pa.date32())
            where = where & (pc.field("date") >= days[0]) & (pc.field("date") <= days[1])
        return dataset.to_table(filter=where)

    # -- upkeep ------------------------------------------------------------------------------------

    def _by_day(self, source: str | None) -> tuple[pa.Table, dict[tuple[Any, ...], list[int]]]:
        """The current version's add actions, and which of them each day partition holds (with `source`,
        only the files holding that source's rows alone)."""
        actions = pa.table(self._handle().get_add_actions(flatten=True))
        if not actions.num_rows or "partition.date" not in actions.column_names:
            return actions, {}
        days = actions.column("partition.date").cast(pa.int32()).to_numpy(zero_copy_only=False)
        keys = [actions.column(f"partition.{c}").to_pylist() for c in self.partition_by if c != "date"]
        low, high = (bounds.to_pylist() for bounds in _sources(actions))
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, day in enumerate(days.tolist()):
            if source is None or only_of(source, low[i], high[i]):
                groups.setdefault((day, *(k[i] for k in keys)), []).append(i)
        return actions, groups

    def day_files(self, source: str | None = None) -> list[DayFiles]:
        actions, groups = self._by_day(source)
        if not groups:
            return []
        sizes = actions.column("size_bytes").to_numpy(zero_copy_only=False)
        out = []
        for (day, *rest), rows in groups.items():
            small = [int(sizes[i]) for i in rows if sizes[i] < SMALL_FILE]
            out.append(DayFiles(int(day), tuple(rest), len(rows), len(small), sum(small)))
        return out

    def _compact(self, days: list[DayFiles], source: str) -> int:
        """Each partition's small files of the source merged into one (`merge_parts`), all in one log
        entry that removes them: delta-rs's own compaction merges every file of a partition, and would
        mix the sources' rows in files that each source's commits then rewrite."""
        from deltalake.transaction import RemoveAction

        dt = self._handle()
        actions, groups = self._by_day(source)
        paths = actions.column("path").to_pylist()
        sizes = [int(s) for s in actions.column("size_bytes").to_pylist()]
        parts = [c for c in actions.column_names if c.startswith("partition.")]
        now = int(time.time() * 1000)
        changes: list[Any] = []
        merged = 0
        try:
            for d in days:
                small = [i for i in groups.get((d.day, *d.key), []) if sizes[i] < SMALL_FILE]
                picked = [small[j] for j in to_merge([sizes[i] for i in small])]
                if not picked:
                    continue
                partition: dict[str, str | None] = {
                    c.removeprefix("partition."): partition_text(actions.column(c)[picked[0]].as_py())
                    for c in parts
                }
                changes.append(merge_parts(self.storage, self.rel, [paths[i] for i in picked], partition))
                changes += [RemoveAction(paths[i], False, now, sizes[i], partition) for i in picked]
                merged += len(picked)
            if not changes:
                return 0
            self._transact(dt, changes, self.deltalake.CommitProperties())
        except BaseException:
            for change in changes:  # the merged files no commit names
                if not isinstance(change, RemoveAction):
                    with contextlib.suppress(FileNotFoundError):
                        self.storage.fs.rm_file(self.storage.full(f"{self.rel}/{change.path}"))
            raise
        return merged

    def _refresh(self) -> None:
        if self._dt is None:
            return
        try:
            self._dt.update_incremental()
        except self.deltalake.exceptions.DeltaError:  # the entries after its version were cleaned up
            self._dt = None

    def _log(self) -> dict[int, tuple[list[str], float]]:
        """The log's files by version (entries, checkpoints, checksums), with the entry's time (ms)."""
        folder = self.storage.full(f"{self.rel}/_delta_log")
        found: dict[int, tuple[list[str], float]] = {}
        self.storage.fs.invalidate_cache(folder)  # entries written since the last listing
        for info in self.storage.fs.ls(folder, detail=True):
            path = info["name"]
            match = LOG_ENTRY.match(path.rsplit("/", 1)[-1])
            if match:
                paths, stamp = found.get(int(match.group(1)), ([], 0.0))
                modified = info.get("mtime") or info.get("LastModified") or info.get("created")
                ms = (modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)) * 1000
                found[int(match.group(1))] = ([*paths, path], max(stamp, ms))
        return found

    def _expire(self, retention_ms: int | None, versions: int, now: bool = False) -> int:
        """Log entries before the last checkpoint are only read by time travel: those beyond the newest
        `versions` or older than the retention are deleted, once enough of them add up."""
        current = self._handle().version()
        log = self._log()
        checkpoints = [v for v, (paths, _) in log.items() if any(".checkpoint." in p for p in paths)]
        if not checkpoints:
            return 0
        floor = max(checkpoints)  # what loading the current version starts from
        cutoff = None if retention_ms is None else time.time() * 1000 - retention_ms
        old = [
            v
            for v, (_, stamp) in log.items()
            if v < floor and (v <= current - versions or (cutoff is not None and stamp < cutoff))
        ]
        if not old or (len(old) < self.policy.slack and not now):
            return 0
        for v in old:
            for path in log[v][0]:
                with contextlib.suppress(FileNotFoundError):
                    self.storage.fs.rm_file(path)
        return len(old)

    def _sweep(self, retention_ms: int) -> int:
        # Files no version younger than the retention needs, and files no log entry names (a killed
        # writer's): a reader on such a version keeps working.
        removed = self._handle().vacuum(
            retention_hours=max(0, retention_ms // 3_600_000),
            enforce_retention_duration=False,
            dry_run=False,
            full=True,
        )
        return len(removed)
