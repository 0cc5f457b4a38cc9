"""Delta data files that etl writes itself rather than delta-rs: a Dask worker's (written outside any
commit, for the run's coordinator to commit with their checkpoint in a grouped commit) and the rewrites
of stored files such a commit replaces rows of.

pyarrow writes one file per partition (the partition columns in its path, as Delta keeps them) and we
make its add action, with the statistics delta-rs itself writes (numRecords, per-column min, max and null
count; timestamps in milliseconds, the bounds widened to whole milliseconds). Names are random (uuid4):
two workers, or a task redone after its worker died, never write the same file.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from etl.storage.files import Storage


def partition_text(value: Any) -> str:
    """A partition value as Delta's add and remove actions hold it."""
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


def write_part(storage: Storage, rel: str, data: pa.Table, partition: dict[str, str | None]) -> Any:
    """One file of one partition of the table at `rel` (`data` without the partition columns), and its
    add action."""
    from deltalake.transaction import AddAction

    folder = "/".join(f"{k}={v}" for k, v in partition.items())
    name = (
        f"{folder}/part-00000-{uuid.uuid4()}-c000.zstd.parquet"
        if folder
        else f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
    )
    path = storage.full(f"{rel}/{name}")
    storage.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with storage.fs.open(path, "wb") as sink:
        pq.write_table(data, sink, compression="zstd")
    size = int(storage.fs.size(path))
    return AddAction(name, size, dict(partition), int(time.time() * 1000), True, _stats(data))


def write_files(storage: Storage, rel: str, partition_by: tuple[str, ...], rows: pa.Table) -> list[Any]:
    """A file per partition of the rows, and their add actions."""
    columns = list(partition_by)
    if not columns:
        return [write_part(storage, rel, rows, {})]
    keys = rows.select(columns).group_by(columns).aggregate([])
    actions = []
    for key in keys.to_pylist():
        where = None
        for name, value in key.items():
            test = pc.equal(rows.column(name), pa.scalar(value, rows.schema.field(name).type))
            where = test if where is None else pc.and_(where, test)
        part = rows.filter(where).drop_columns(columns)
        values: dict[str, str | None] = {k: partition_text(v) for k, v in key.items()}
        actions.append(write_part(storage, rel, part, values))
    return actions
