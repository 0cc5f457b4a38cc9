"""Delta data files that etl writes itself rather than delta-rs: a Dask worker's (written outside any
commit, for the run's coordinator to commit with their checkpoint in a grouped commit), the rewrites
of stored files such a commit replaces rows of, and the merges of one source's small files (compaction:
delta-rs's own merges every file of a partition, whichever source wrote it).

pyarrow writes one file per partition (the partition columns in its path, as Delta keeps them) and we
make its add action, with the statistics delta-rs itself writes (numRecords, per-column min, max and null
count; timestamps in milliseconds, the bounds widened to whole milliseconds). Names are random (uuid4):
two workers, or a task redone after its worker died, never write the same file.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from etl.storage.atomic import Storage

if TYPE_CHECKING:  # deltalake loads for Delta tables only
    from deltalake.transaction import AddAction


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


class _Stats:
    """A file's statistics as Delta keeps them, gathered a table at a time (a merge writes its file from
    several)."""

    def __init__(self) -> None:
        self.records = 0
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.nulls: dict[str, int] = {}
        self.unknown: set[str] = set()  # columns with a bound Delta's JSON cannot hold (NaN, inf)

    def add(self, data: pa.Table) -> None:
        self.records += data.num_rows
        for f in data.schema:
            column = data.column(f.name)
            self.nulls[f.name] = self.nulls.get(f.name, 0) + column.null_count
            if pa.types.is_nested(f.type) or pa.types.is_binary(f.type) or column.null_count == len(column):
                continue
            extremes = pc.min_max(column).as_py()
            for bounds, value, pick in ((self.low, extremes["min"], min), (self.high, extremes["max"], max)):
                if value is None or (isinstance(value, float) and not np.isfinite(value)):
                    self.unknown.add(f.name)
                elif f.name in bounds:
                    bounds[f.name] = pick(bounds[f.name], value)
                else:
                    bounds[f.name] = value

    def json(self) -> str:
        low: dict[str, Any] = {}
        high: dict[str, Any] = {}
        for name in self.low:
            if name in self.high and name not in self.unknown:
                low[name], high[name] = _bound(self.low[name], False), _bound(self.high[name], True)
        return json.dumps(
            {"numRecords": self.records, "minValues": low, "maxValues": high, "nullCount": self.nulls}
        )


def _new_file(storage: Storage, rel: str, partition: dict[str, str | None]) -> tuple[str, str]:
    """A new data file's name in the table at `rel` (random: a task redone never writes one twice), and
    its full path, its folder made."""
    folder = "/".join(f"{k}={v}" for k, v in partition.items())
    name = f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
    name = f"{folder}/{name}" if folder else name
    path = storage.full(f"{rel}/{name}")
    storage.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    return name, path


def write_part(storage: Storage, rel: str, data: pa.Table, partition: dict[str, str | None]) -> AddAction:
    """One file of one partition of the table at `rel` (`data` without the partition columns), and its
    add action."""
    from deltalake.transaction import AddAction

    name, path = _new_file(storage, rel, partition)
    with storage.fs.open(path, "wb") as sink:
        pq.write_table(data, sink, compression="zstd")
    stats = _Stats()
    stats.add(data)
    size = int(storage.fs.size(path))
    return AddAction(name, size, dict(partition), int(time.time() * 1000), True, stats.json())


def merge_parts(storage: Storage, rel: str, files: list[str], partition: dict[str, str | None]) -> AddAction:
    """Data files of one partition (relative to the table) merged into one, a file's rows held at a
    time, and its add action: the same rows, so no data change (a stream reading the table skips it)."""
    from deltalake.transaction import AddAction

    name, path = _new_file(storage, rel, partition)
    stats = _Stats()
    try:
        with storage.fs.open(path, "wb") as sink:
            writer: pq.ParquetWriter | None = None
            for part in files:
                with storage.fs.open(storage.full(f"{rel}/{part}"), "rb") as source:
                    rows = pq.read_table(source)
                if writer is None:
                    writer = pq.ParquetWriter(sink, rows.schema, compression="zstd")
                rows = rows.cast(writer.schema)
                writer.write_table(rows)
                stats.add(rows)
            if writer is not None:
                writer.close()
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            storage.fs.rm_file(path)
        raise
    size = int(storage.fs.size(path))
    return AddAction(name, size, dict(partition), int(time.time() * 1000), False, stats.json())


def write_files(storage: Storage, rel: str, partition_by: tuple[str, ...], rows: pa.Table) -> list[AddAction]:
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
