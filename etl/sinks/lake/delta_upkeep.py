"""A Delta table's upkeep: one source's small files merged, log entries deleted, unreferenced files swept.

The log does not grow with history: delta-rs writes a checkpoint every few versions
(delta_table.CHECKPOINT_EVERY), so loading reads the last checkpoint and at most that many entries, and
the run's upkeep deletes entries the current version does not need once beyond the newest
`sink.versions` or older than the retention.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from etl.sinks.lake.common import SMALL_FILE, DayFiles, only_of, to_merge
from etl.sinks.lake.delta_commit import sources, transact
from etl.sinks.lake.delta_files import merge_parts, partition_text
from etl.storage.atomic import Storage

if TYPE_CHECKING:  # deltalake loads for Delta tables only
    from deltalake import DeltaTable as Handle

LOG_ENTRY = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet|crc)$")


def _by_day(
    dt: Handle, partition_by: tuple[str, ...], source: str | None
) -> tuple[pa.Table, dict[tuple[Any, ...], list[int]]]:
    """The current version's add actions, and which of them each day partition holds (with `source`,
    only the files holding that source's rows alone)."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if not actions.num_rows or "partition.date" not in actions.column_names:
        return actions, {}
    days = actions.column("partition.date").cast(pa.int32()).to_numpy(zero_copy_only=False)
    keys = [actions.column(f"partition.{c}").to_pylist() for c in partition_by if c != "date"]
    low, high = (bounds.to_pylist() for bounds in sources(actions))
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, day in enumerate(days.tolist()):
        if source is None or only_of(source, low[i], high[i]):
            groups.setdefault((day, *(k[i] for k in keys)), []).append(i)
    return actions, groups


def day_files(dt: Handle, partition_by: tuple[str, ...], source: str | None) -> list[DayFiles]:
    """The data files of each day partition of the loaded version (`LakeTable.day_files`)."""
    actions, groups = _by_day(dt, partition_by, source)
    if not groups:
        return []
    sizes = actions.column("size_bytes").to_numpy(zero_copy_only=False)
    out = []
    for (day, *rest), rows in groups.items():
        small = [int(sizes[i]) for i in rows if sizes[i] < SMALL_FILE]
        out.append(DayFiles(int(day), tuple(rest), len(rows), len(small), sum(small)))
    return out


def compact(
    dt: Handle, storage: Storage, rel: str, partition_by: tuple[str, ...], days: list[DayFiles], source: str
) -> int:
    """Each partition's small files of the source merged into one (`merge_parts`), all in one log
    entry that removes them: delta-rs's own compaction merges every file of a partition, and would
    mix the sources' rows in files that each source's commits then rewrite. The files merged away."""
    from deltalake import CommitProperties
    from deltalake.transaction import RemoveAction

    actions, groups = _by_day(dt, partition_by, source)
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
            changes.append(merge_parts(storage, rel, [paths[i] for i in picked], partition))
            changes += [RemoveAction(paths[i], False, now, sizes[i], partition) for i in picked]
            merged += len(picked)
        if not changes:
            return 0
        transact(dt, partition_by, changes, CommitProperties())
    except BaseException:
        for change in changes:  # the merged files no commit names
            if not isinstance(change, RemoveAction):
                with contextlib.suppress(FileNotFoundError):
                    storage.fs.rm_file(storage.full(f"{rel}/{change.path}"))
        raise
    return merged


def _log(storage: Storage, rel: str) -> dict[int, tuple[list[str], float]]:
    """The log's files by version (entries, checkpoints, checksums), with the entry's time (ms)."""
    folder = storage.full(f"{rel}/_delta_log")
    found: dict[int, tuple[list[str], float]] = {}
    storage.fs.invalidate_cache(folder)  # entries written since the last listing
    for info in storage.fs.ls(folder, detail=True):
        path = info["name"]
        match = LOG_ENTRY.match(path.rsplit("/", 1)[-1])
        if match:
            paths, stamp = found.get(int(match.group(1)), ([], 0.0))
            modified = info.get("mtime") or info.get("LastModified") or info.get("created")
            ms = (modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)) * 1000
            found[int(match.group(1))] = ([*paths, path], max(stamp, ms))
    return found


def expire(
    dt: Handle, storage: Storage, rel: str, retention_ms: int | None, versions: int, slack: int, now: bool
) -> int:
    """Log entries before the last checkpoint are only read by time travel: those beyond the newest
    `versions` or older than the retention are deleted, once `slack` of them add up (`now`: whatever
    their number); how many."""
    current = dt.version()
    log = _log(storage, rel)
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
    if not old or (len(old) < slack and not now):
        return 0
    for v in old:
        for path in log[v][0]:
            with contextlib.suppress(FileNotFoundError):
                storage.fs.rm_file(path)
    return len(old)


def sweep(dt: Handle, retention_ms: int) -> int:
    """Files no version younger than the retention needs, and files no log entry names (a killed
    writer's), deleted: a reader on such a version keeps working. How many."""
    removed = dt.vacuum(
        retention_hours=max(0, retention_ms // 3_600_000),
        enforce_retention_duration=False,
        dry_run=False,
        full=True,
    )
    return len(removed)
