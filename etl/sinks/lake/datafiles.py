"""Data files written into a table outside any commit (by Dask workers, the way Spark writes Delta and
Iceberg tables), for the run's coordinator to commit with their checkpoint in a grouped commit.

Until a commit names them, readers never see these files; a worker killed before that leaves files
no version references, and the upkeep's sweep deletes them once older than the retention. Names are
random (uuid4): two workers, or a task redone after its worker died, never write the same file.

Iceberg: the files pyiceberg's writer makes (the table's schema with its field ids, partition spec,
Parquet settings and statistics; iceberg.py's `_Files`, or pyiceberg's `_dataframe_to_data_files` for
rows of another schema) and the `DataFile` records travel back pickled. Delta: pyarrow writes one file per
partition (the partition columns in its path, as Delta keeps them) and we make its add action, with
the statistics delta-rs itself writes (numRecords, per-column min, max and null count; timestamps in
milliseconds, the bounds widened to whole milliseconds).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from etl.sinks.lake.common import LakeTable, Replace

if TYPE_CHECKING:
    from etl.sinks.lake.delta import DeltaTable


def write_data_files(table: LakeTable, rows: pa.Table) -> list[Any]:
    """The rows as data files of `table` (not committed): the format's own records of them."""
    from etl.sinks.lake.delta import DeltaTable
    from etl.sinks.lake.iceberg import IcebergTable

    if isinstance(table, IcebergTable):
        return table.write_files(rows)
    assert isinstance(table, DeltaTable)
    return write_delta_files(table, rows)


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _bound(value: Any, up: bool) -> Any:
    """A statistics value as Delta's JSON has it: timestamps to the millisecond, rounded outwards."""
    if isinstance(value, datetime):
        micros = value.microsecond % 1000
        if micros and up:
            value = value.replace(microsecond=value.microsecond - micros) + timedelta(milliseconds=1)
        elif micros:
            value = value.replace(microsecond=value.microsecond - micros)
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _stats(data: pa.Table) -> str:
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for f in data.schema:
        column = data.column(f.name)
        nulls[f.name] = column.null_count
        if pa.types.is_nested(f.type) or pa.types.is_binary(f.type) or column.null_count == len(column):
            continue
        extremes = pc.min_max(column).as_py()
        a, b = _bound(extremes["min"], False), _bound(extremes["max"], True)
        if a is not None and b is not None:
            low[f.name], high[f.name] = a, b
    return json.dumps({"numRecords": data.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls})


def write_delta_part(table: DeltaTable, data: pa.Table, partition: dict[str, str | None]) -> Any:
    """One file of one partition (`data` without the partition columns), and its add action."""
    from deltalake.transaction import AddAction

    folder = "/".join(f"{k}={v}" for k, v in partition.items())
    rel = (
        f"{folder}/part-00000-{uuid.uuid4()}-c000.zstd.parquet"
        if folder
        else f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
    )
    path = table.storage.full(f"{table.rel}/{rel}")
    table.storage.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with table.storage.fs.open(path, "wb") as sink:
        pq.write_table(data, sink, compression="zstd")
    size = int(table.storage.fs.size(path))
    return AddAction(rel, size, dict(partition), int(time.time() * 1000), True, _stats(data))


def write_delta_files(table: DeltaTable, rows: pa.Table) -> list[Any]:
    """A file per partition of the rows."""
    columns = list(table.partition_by)
    if not columns:
        return [write_delta_part(table, rows, {})]
    keys = rows.select(columns).group_by(columns).aggregate([])
    actions = []
    for key in keys.to_pylist():
        where = None
        for name, value in key.items():
            test = pc.equal(rows.column(name), pa.scalar(value, rows.schema.field(name).type))
            where = test if where is None else pc.and_(where, test)
        part = rows.filter(where).drop_columns(columns)
        values: dict[str, str | None] = {k: _text(v) for k, v in key.items()}
        actions.append(write_delta_part(table, part, values))
    return actions


def rewrite_delta_files(table: DeltaTable, dt: Any, replace: Replace) -> list[Any]:
    """The stored files holding rows `replace` removes: a remove action for each, and the add action of
    its rewrite without those rows (none when nothing else is left)."""
    from deltalake.transaction import RemoveAction

    actions = pa.table(dt.get_add_actions(flatten=True))
    if not actions.num_rows:
        return []
    key = replace.time_key

    def stat(name: str) -> np.ndarray:
        from etl.sinks.lake.delta import _numbers

        return (
            _numbers(actions.column(name))
            if name in actions.column_names
            else np.full(actions.num_rows, np.nan)
        )

    hit = replace.may_match(
        stat(f"min.{key}"), stat(f"max.{key}"), stat("min.param_id"), stat("max.param_id")
    )
    parts = [c for c in actions.column_names if c.startswith("partition.")]
    out: list[Any] = []
    now = int(time.time() * 1000)
    for i in np.flatnonzero(hit).tolist():
        rel = actions.column("path")[i].as_py()
        partition: dict[str, str | None] = {
            c.removeprefix("partition."): _text(actions.column(c)[i].as_py()) for c in parts
        }
        with table.storage.fs.open(table.storage.full(f"{table.rel}/{rel}"), "rb") as source:
            stored = pq.read_table(source)
        removed = replace.matches(stored)
        if not removed.any():
            continue
        size = int(actions.column("size_bytes")[i].as_py())
        out.append(RemoveAction(rel, True, now, size, partition))
        if not removed.all():
            out.append(write_delta_part(table, stored.filter(pa.array(~removed)), partition))
    return out
