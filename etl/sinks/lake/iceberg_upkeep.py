"""An Iceberg table's upkeep: one source's small files merged, snapshots expired, unreferenced files swept.

Metadata does not grow with history: each commit's transaction expires old snapshots too
(iceberg_commit.py), the append merges small manifests once enough add up and drops those left with no
live file (table properties `commit.manifest-merge.*`), and the catalog keeps a few older metadata files
(`write.metadata.previous-versions-max`, deleted after commit).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from etl.sinks.lake.common import SMALL_FILE, DayFiles, Policy, only_of, to_merge
from etl.sinks.lake.iceberg_commit import forget, stage, stage_expiry
from etl.sinks.lake.iceberg_files import DataFiles, partition_of, storage_path
from etl.storage.atomic import Storage

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table


def _tasks(table: Table) -> list[FileScanTask]:
    return list(table.scan().plan_files()) if table.current_snapshot() is not None else []


def _of(table: Table, source: str | None) -> Callable[[DataFile], bool]:
    """Whether a data file counts for `source`: every file without one; with one, the files whose
    bounds say they hold that source's rows alone."""
    if source is None:
        return lambda data_file: True
    field = table.schema().find_field("source").field_id

    def text(bounds: dict[int, bytes] | None) -> str | None:
        value = (bounds or {}).get(field)
        return value.decode("utf-8", "replace") if value is not None else None

    return lambda data_file: only_of(source, text(data_file.lower_bounds), text(data_file.upper_bounds))


def day_files(table: Table, source: str | None) -> list[DayFiles]:
    """The data files of each day partition of the current snapshot (`LakeTable.day_files`)."""
    counted = _of(table, source)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for task in _tasks(table):
        if not counted(task.file):
            continue
        key = partition_of(task.file)
        groups.setdefault(key, []).append(int(task.file.file_size_in_bytes))
    out = []
    for key, sizes in groups.items():
        small = [s for s in sizes if s < SMALL_FILE]
        out.append(DayFiles(int(key[0]), tuple(key[1:]), len(sizes), len(small), sum(small)))
    return out


def compact(
    table: Table, files_of: DataFiles, policy: Policy, time_key: str, days: list[DayFiles], source: str
) -> int:
    """Each partition's small files of the source rewritten into as few as the target size allows,
    all in one commit (pyiceberg has no rewrite action; the rows of one partition are held)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    from etl.sinks.lake.pyiceberg_compat import transaction

    counted = _of(table, source)
    wanted = {(d.day, *d.key) for d in days}
    groups: dict[tuple[Any, ...], list[FileScanTask]] = {}
    for task in _tasks(table):
        key = partition_of(task.file)
        if key in wanted and task.file.file_size_in_bytes < SMALL_FILE and counted(task.file):
            groups.setdefault(key, []).append(task)
    schema = table.metadata.schema()
    removed: list[DataFile] = []
    written: list[DataFile] = []
    try:
        for tasks in groups.values():
            picked = [tasks[i] for i in to_merge([t.file.file_size_in_bytes for t in tasks])]
            if not picked:
                continue
            rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(picked)
            rows = rows.sort_by([("param_id", "ascending"), (time_key, "ascending")])
            written += files_of.write(table, rows)
            removed += [t.file for t in picked]
        if not removed:
            return 0
        txn = transaction(table)
        staged = stage(txn, table.io, removed, written, {})
        expired = stage_expiry(table, txn, staged, policy.retention_ms, policy.versions, policy.slack)
        txn.commit_transaction()
    except BaseException:
        for data_file in written:
            with contextlib.suppress(Exception):
                table.io.delete(data_file.file_path)
        raise
    forget(table, expired)
    return len(removed)


def expire(table: Table, retention_ms: int | None, versions: int, slack: int, now: bool) -> int:
    """Snapshots beyond the newest `versions` or older than the retention expired in a commit of their
    own, once `slack` of them add up (`now`: whatever their number); how many."""
    from etl.sinks.lake.pyiceberg_compat import transaction

    if retention_ms is None and len(table.metadata.snapshots) <= versions:
        return 0
    txn = transaction(table)
    expired = stage_expiry(table, txn, 0, retention_ms, versions, slack, force=now)
    if not expired:
        return 0
    txn.commit_transaction()
    forget(table, expired)
    return len(expired)


def sweep(table: Table, storage: Storage, retention_ms: int) -> int:
    """Files under the table's location that no kept snapshot or metadata file references (removed
    data files, a killed writer's), older than the retention."""
    table.refresh()
    keep = {storage_path(storage, p) for p in table.inspect.all_files().column("file_path").to_pylist()}
    io = table.io
    for snapshot in table.metadata.snapshots:
        keep.add(storage_path(storage, snapshot.manifest_list))
        keep.update(storage_path(storage, m.manifest_path) for m in snapshot.manifests(io))
    keep.add(storage_path(storage, table.metadata_location))
    keep.update(storage_path(storage, entry.metadata_file) for entry in table.metadata.metadata_log)
    cutoff = time.time() * 1000 - retention_ms
    removed = 0
    root = storage_path(storage, table.location())
    storage.fs.invalidate_cache(root)
    for path, info in storage.fs.find(root, detail=True).items():
        modified = info.get("mtime") or info.get("LastModified")
        stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
        if (
            path not in keep
            and path.endswith((".parquet", ".avro", ".metadata.json"))
            and stamp * 1000 < cutoff
        ):
            with contextlib.suppress(FileNotFoundError):
                storage.fs.rm_file(path)
                removed += 1
    return removed
