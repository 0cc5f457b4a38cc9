"""A Delta commit: one log entry that replaces a group's rows and carries its checkpoint.

When a group's windows may have rows in the table (some file's partition and statistics overlap them),
`write_deltalake(mode="overwrite", predicate=...)` removes them (rewriting only the files that hold
some) and adds the new files in that entry; otherwise the rows are appended (`mode="append"`, a blind
append nothing is planned for). Files written elsewhere (by Dask workers) are committed with
`create_write_transaction`. The checkpoint is the entry's commit metadata (`commitInfo`), and
`etl.app`/`etl.version` are also an application transaction (`txn`), which Delta keeps in every
snapshot and checkpoint: `transaction_version(app)` reads our last version whatever was cleaned up.
On S3 delta-rs commits with a conditional PUT of the log entry (`conditional_put: etag`), so two
writers never both win one version; a commit that lost is planned again on the newer version
(etl/support/optimistic.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from etl.sinks.lake.common import APP, TS_US, VERSION, Change, Checkpoint, Replace
from etl.sinks.lake.delta_files import partition_text, write_part
from etl.storage.atomic import Storage
from etl.support import optimistic

if TYPE_CHECKING:  # deltalake loads for Delta tables only
    from deltalake import CommitProperties
    from deltalake import DeltaTable as Handle  # delta-rs's; etl's is delta_table.DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    Action = AddAction | RemoveAction


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


def _numbers(column: Any, unit_ms: int = 1) -> np.ndarray:
    """A statistics column as float64 (NaN where unknown): timestamps in epoch ms."""
    array = pa.array(column) if not isinstance(column, pa.ChunkedArray | pa.Array) else column
    if pa.types.is_timestamp(array.type):
        array = array.cast(TS_US).cast(pa.int64())
        return np.asarray(pc.divide(array.cast(pa.float64()), 1000.0).to_numpy(zero_copy_only=False), float)
    return np.asarray(array.cast(pa.float64()).to_numpy(zero_copy_only=False), float) * unit_ms


def lost_race(exc: Exception) -> bool:
    """Did a commit fail only because another writer got in first? Either it took the version
    (CommitFailedError), or, while the commit was checked against the versions made since its own, the
    other writer's upkeep had deleted that version's log entry (delta-rs then names the version
    invalid, or the entry's file not found). Nothing of ours was committed in any case, and a commit
    replaces what it covers: planning again is safe."""
    from deltalake.exceptions import CommitFailedError

    text = str(exc)
    return (
        isinstance(exc, CommitFailedError)
        or text.startswith("Invalid table version")
        or ("_delta_log/" in text and "not found" in text.lower())
    )


def paths(dt: Handle) -> set[str]:
    """The data files of the loaded version, relative to the table."""
    return set(pa.table(dt.get_add_actions(flatten=False)).column("path").to_pylist())


def sources(actions: pa.Table) -> tuple[pa.Array, pa.Array]:
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


def may_hold(dt: Handle, replace: Replace) -> tuple[pa.Table, np.ndarray]:
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
        *sources(actions),
    )
    return actions, hit


def properties(checkpoint: Checkpoint | None) -> CommitProperties:
    """The commit's metadata: the checkpoint, and our app's version as an application transaction."""
    import deltalake as dl

    if checkpoint is None:
        return dl.CommitProperties()
    carried = checkpoint.properties()
    return dl.CommitProperties(
        custom_metadata=carried,
        app_transactions=[dl.Transaction(carried[APP], int(carried[VERSION]))],
    )


def commit(
    newest: Callable[[], Handle], storage: Storage, rel: str, partition_by: tuple[str, ...], change: Change
) -> list[str]:
    """The change (`files`: add actions of data files already written) in one log entry, planned on the
    handle `newest()` brings to the table's newest version, and planned again when another writer got in
    first; the files it added."""
    import deltalake as dl

    def attempt() -> list[str]:
        dt = newest()  # another source's run may have moved on
        before = paths(dt)
        replace, rows = change.replace, change.rows
        replacing = replace if replace is not None and may_hold(dt, replace)[1].any() else None
        settings = dl.WriterProperties(compression="ZSTD")
        if change.files:
            removed = _rewrite(storage, rel, dt, replacing) if replacing else []
            transact(dt, partition_by, list(change.files) + removed, properties(change.checkpoint))
        elif replacing:
            assert rows is not None
            dl.write_deltalake(
                dt,
                rows,
                mode="overwrite",
                predicate=predicate(replacing),
                writer_properties=settings,
                commit_properties=properties(change.checkpoint),
            )
        else:  # a blind append: no stored file can hold a replaced row
            assert rows is not None
            dl.write_deltalake(
                dt,
                rows,
                mode="append",
                writer_properties=settings,
                commit_properties=properties(change.checkpoint),
            )
        return sorted(paths(dt) - before)

    return optimistic.swap(attempt, lost_race)


def transact(
    dt: Handle, partition_by: tuple[str, ...], actions: list[Action], carried: CommitProperties
) -> None:
    """Add actions of data files already written (and remove actions of stored ones) in one log
    entry; the handle then reads that entry, which delta-rs leaves it without: the next commit's
    plan, the files reported and the sweep need the version just made."""
    dt.create_write_transaction(
        actions,
        mode="append",
        schema=dt.schema(),
        partition_by=list(partition_by) or None,
        commit_properties=carried,
    )
    dt.update_incremental()


def _rewrite(storage: Storage, rel: str, dt: Handle, replace: Replace) -> list[Action]:
    """Files of Dask workers replacing stored rows: the stored files that hold some are rewritten
    without them (a remove action for each, and the add action of its rewrite without those rows,
    none when nothing else is left)."""
    from deltalake.transaction import RemoveAction

    actions, hit = may_hold(dt, replace)
    parts = [c for c in actions.column_names if c.startswith("partition.")]
    out: list[Action] = []
    now = int(time.time() * 1000)
    for i in np.flatnonzero(hit).tolist():
        path = actions.column("path")[i].as_py()
        partition: dict[str, str | None] = {
            c.removeprefix("partition."): partition_text(actions.column(c)[i].as_py()) for c in parts
        }
        with storage.fs.open(storage.full(f"{rel}/{path}"), "rb") as source:
            stored = pq.read_table(source)
        probe = stored
        if "source" in partition:  # a partition column: in the file's path, not in its rows
            probe = stored.append_column("source", pa.array([partition["source"]] * stored.num_rows))
        removed = replace.matches(probe)
        if not removed.any():
            continue
        size = int(actions.column("size_bytes")[i].as_py())
        out.append(RemoveAction(path, True, now, size, partition))
        if not removed.all():
            out.append(write_part(storage, rel, stored.filter(pa.array(~removed)), partition))
    return out
