"""An Iceberg commit: one transaction made visible by one swap of the table's metadata pointer in the
catalog (which refuses a swap from a stale pointer: optimistic concurrency), through pyiceberg's snapshot
API (`Transaction.update_snapshot`).

When no stored file's partition and statistics overlap the group's windows it is one append snapshot;
otherwise the files that hold replaced rows are rewritten without them (copy-on-write, only those files:
the scan plan prunes the rest), an overwrite snapshot removes them and an append snapshot then adds
their rewrites and the new files. The last snapshot's summary carries the checkpoint, and the same
transaction sets the table property `etl.checkpoint.{app}` to it: properties outlive expired snapshots,
so recovery finds our last commit whatever expiry removed. The same transaction also expires snapshots
beyond the newest `sink.versions` (or older than the retention) once enough add up, and their manifest
lists and manifests are deleted once it is visible. A commit that lost the race is planned again on the
newer snapshot (etl/support/optimistic.py).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import reduce
from typing import TYPE_CHECKING

import pyarrow as pa

from etl.sinks.lake.common import SMALL_FILE, Change, Policy, Replace
from etl.sinks.lake.iceberg_files import DataFiles
from etl.support import optimistic

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table, Transaction
    from pyiceberg.table.snapshots import Snapshot

CHECKPOINT_PROPERTY = "etl.checkpoint."  # + app: our last commit's checkpoint, kept through expiry


def expression(replace: Replace) -> BooleanExpression:
    """pyiceberg's row filter, of the replace's source alone (its scan plan then skips every other
    source's files, and a concurrent commit of another source is no conflict)."""
    from pyiceberg.expressions import AlwaysFalse, And, EqualTo, GreaterThanOrEqual, In, LessThan, Or

    source = EqualTo("source", replace.source)
    if replace.groups is None:
        return source
    key = replace.time_key
    parts = [
        And(GreaterThanOrEqual(key, iso(a)), LessThan(key, iso(b)), In("param_id", set(ids)))
        for a, b, ids in replace.groups
    ]
    return And(source, reduce(Or, parts)) if parts else AlwaysFalse()


def may_hold(table: Table, replace: Replace) -> Iterator[FileScanTask]:
    """The scan tasks of the current snapshot's files that may hold a row `replace` removes: pyiceberg's
    plan prunes by partition and statistics, without reading a data file."""
    if table.current_snapshot() is None:
        return iter(())
    return iter(table.scan(row_filter=expression(replace)).plan_files())


def lost_race(exc: Exception) -> bool:
    """Did a commit (or a schema change) fail only because another writer got in between? Either it took
    the snapshot, or its expiry deleted the manifests of the snapshot we planned on. Nothing of ours was
    committed: planning again on its snapshot is safe."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    return isinstance(exc, CommitFailedException | ValidationException | FileNotFoundError)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="microseconds")


def stage(
    txn: Transaction,
    io: FileIO,
    removed: Sequence[DataFile],
    added: Sequence[DataFile],
    properties: dict[str, str],
    replaces: BooleanExpression | None = None,
) -> int:
    """Stage a commit's snapshots in `txn`: an overwrite that removes `removed` (the files holding rows
    `replaces` matches), then an append that adds `added` (what the removed files keep among them) and
    merges the manifests; the last one carries `properties`. Both become visible with the transaction's
    one swap; how many were staged."""
    from etl.sinks.lake.pyiceberg_compat import overwrite

    staged = 0
    if removed:
        with overwrite(txn, io, {} if added else properties) as producer:
            if replaces is not None:  # the overwrite's conflict filter
                producer.delete_by_predicate(replaces)
            for data_file in removed:
                producer.delete_data_file(data_file)
        staged += 1
    if added or not removed:
        with txn.update_snapshot(snapshot_properties=properties).merge_append() as append:
            for data_file in added:
                append.append_data_file(data_file)
        staged += 1
    return staged


def commit(
    handle: Callable[[], Table], files_of: DataFiles, policy: Policy, time_key: str | None, change: Change
) -> list[str]:
    """The change in one transaction, planned on the table `handle()` holds and planned again on the
    newer snapshot when another writer got in between; the data files it added."""

    def attempt() -> list[str]:
        return _commit_once(handle(), files_of, policy, time_key, change)

    return optimistic.swap(attempt, lost_race, again=lambda: handle().refresh())


def _commit_once(
    table: Table, files_of: DataFiles, policy: Policy, time_key: str | None, change: Change
) -> list[str]:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    from etl.sinks.lake.pyiceberg_compat import transaction

    rows, replace, checkpoint = change.rows, change.replace, change.checkpoint
    written: list[DataFile] = []
    try:
        new = list(change.files)
        if rows is not None and rows.num_rows:
            files_of.plan(table, rows.schema)  # rows that do not fit fail here, before any file is read
        removed: list[DataFile] = []
        kept: list[pa.Table] = []
        kept_bytes = 0
        if replace is not None:
            schema = table.metadata.schema()
            for task in may_hold(table, replace):
                old = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table([task])
                hit = replace.matches(old)
                if not hit.any():
                    continue  # its statistics overlap, its rows do not
                removed.append(task.file)
                if not hit.all():
                    kept.append(old.filter(pa.array(~hit)))
                    kept_bytes += task.file.file_size_in_bytes
        if rows is not None and rows.num_rows and kept and kept_bytes < SMALL_FILE:
            # Small rewrites go into the new rows' files: an hourly run's partition keeps one file
            # rather than gaining one per run (large ones are rewritten apart: never a day's rows).
            merged = pa.concat_tables([rows, *(k.select(rows.column_names).cast(rows.schema) for k in kept)])
            if time_key:
                merged = merged.sort_by([("param_id", "ascending"), (time_key, "ascending")])
            rows, kept = merged, []
        if rows is not None and rows.num_rows:
            written += files_of.write(table, rows)
        if kept:
            written += files_of.write(table, pa.concat_tables(kept))
        new += written
        if not (new or removed or checkpoint):
            return []
        properties = checkpoint.properties() if checkpoint else {}
        txn = transaction(table)
        replaces = expression(replace) if replace is not None else None
        staged = stage(txn, table.io, removed, new, properties, replaces)
        if checkpoint is not None:
            txn.set_properties({CHECKPOINT_PROPERTY + checkpoint.app: json.dumps(properties)})
        expired = stage_expiry(table, txn, staged, policy.retention_ms, policy.versions, policy.slack)
        if change.ready is not None:
            change.ready()
        txn.commit_transaction()
    except BaseException:
        for data_file in written:  # never referenced: gone with the failed commit
            with contextlib.suppress(Exception):
                table.io.delete(data_file.file_path)
        raise
    forget(table, expired)
    return [f.file_path for f in new]


def stage_expiry(
    table: Table,
    txn: Transaction,
    staged: int,
    retention_ms: int | None,
    versions: int,
    slack: int,
    force: bool = False,
) -> list[Snapshot]:
    """Snapshots beyond the newest `versions` or older than the retention, expired in `txn` (a
    transaction of `table` that stages `staged` snapshots) once `slack` of them add up (the
    cleanup that follows reads every kept snapshot's list)."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    before = table.metadata  # without this transaction's changes: cheap to read
    cutoff = None if retention_ms is None else time.time() * 1000 - retention_ms
    oldest = min((s.timestamp_ms for s in before.snapshots), default=None)
    young = cutoff is None or oldest is None or oldest >= cutoff
    if not force and young and len(before.snapshots) + staged < versions + slack:
        return []  # nothing past `versions` or the retention yet
    metadata = txn.table_metadata
    current = metadata.current_snapshot_id
    ordered = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    newest = {s.snapshot_id for s in ordered[-versions:]}
    old = [
        s
        for s in ordered
        if s.snapshot_id != current
        and (s.snapshot_id not in newest or (cutoff is not None and s.timestamp_ms < cutoff))
    ]
    if not old or (len(old) < slack and not force):
        return []
    ExpireSnapshots(txn).by_ids([s.snapshot_id for s in old]).commit()
    return old


def forget(table: Table, expired: list[Snapshot]) -> None:
    """The manifest lists of expired snapshots, and the manifests no kept snapshot lists."""
    if not expired:
        return
    io = table.io
    kept = {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(io)}
    for snapshot in expired:
        with contextlib.suppress(Exception):
            for manifest in snapshot.manifests(io):
                if manifest.manifest_path not in kept:
                    io.delete(manifest.manifest_path)
            io.delete(snapshot.manifest_list)
