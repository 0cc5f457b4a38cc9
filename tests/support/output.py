"""What an output holds (a local folder or any fsspec URL), read as analysts read it: series and quality
datasets from files or lake tables' current snapshots, and the checkpoints a run left."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds

from etl.model import SCHEMAS, Series
from etl.storage.atomic import Storage
from tests.support.expected import SERIES, SOURCE


def checkpoints(out, shard=None, source: str = SOURCE):
    """The coverage a run left (a local folder or any fsspec URL), read as the tool reads it."""
    from etl.state import StateStore

    folder = f"{out}/_state/{source}" + (f"/{shard.folder}" if shard else "")
    return StateStore(Storage(folder)).load()


def data_files(root, series: str) -> list[str]:
    """The data files of a series, relative to the root."""
    storage = Storage(str(root))
    return sorted(f for f in storage.find(series) if not f.rsplit("/", 1)[-1].startswith("."))


def lake_format(root) -> str | None:
    """delta, iceberg or postgres when the output holds tables (read through their snapshots, not files)."""
    from tests.support.postgres import OUTPUTS

    if str(root) in OUTPUTS:
        return "postgres"
    storage = Storage(str(root))
    storage.fs.invalidate_cache()
    if storage.fs.exists(storage.full("catalog.db")):
        return "iceberg"
    if any(storage.fs.exists(storage.full(f"{s}/_delta_log")) for s in (*SERIES, "quality")):
        return "delta"
    return None


def read_lake(root, name: str, fmt: str) -> pa.Table:
    """A lake table's current snapshot, timestamps back in ms, without the `date` column."""
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from tests.support.postgres import OUTPUTS, database

    if fmt == "postgres":
        url, schema = OUTPUTS[str(root)]
        sink = SinkConfig.model_validate({"format": fmt, "path": str(root), "dsn": url, "schema": schema})
        lake = Lake(sink, Storage(str(root)), database(root))  # type: ignore[arg-type]
    else:
        lake = Lake(SinkConfig(format=fmt, path=str(root)), Storage(str(root)))
    table = lake.quality() if name == "quality" else lake.series(name)
    if not table.exists():
        return pa.table({})
    rows = table.dataset().to_table()
    columns = [
        rows.column(f.name).cast(pa.timestamp("ms", tz="UTC"))
        if pa.types.is_timestamp(f.type)
        else rows.column(f.name).cast(pa.string())
        if pa.types.is_large_string(f.type)
        else rows.column(f.name)
        for f in rows.schema
    ]
    return pa.Table.from_arrays(columns, names=rows.column_names)


def read(root, series: str, fmt: str = "parquet") -> pa.Table:
    """A series dataset (local folder or any fsspec URL) as one table sorted by (param_id, ts)."""
    storage = Storage(str(root))
    storage.fs.invalidate_cache()  # files written by other processes since the last listing
    lake = lake_format(root)
    if lake:
        table = read_lake(root, series, lake)
    else:
        table = ds.dataset(
            storage.full(series),
            filesystem=None if storage.local else storage.fs,
            format=fmt,
            partitioning="hive",
        ).to_table()
    table = table.drop_columns([c for c in ("date",) if c in table.column_names])
    return table.select(SCHEMAS[Series(series)].names).sort_by(
        [("param_id", "ascending"), ("ts", "ascending")]
    )


def read_quality(root) -> pa.Table:
    """The quality dataset (Parquet) as the files hold it (QUALITY_SCHEMA), sorted by (param_id, day)."""
    from etl.model import QUALITY, QUALITY_SCHEMA

    storage = Storage(str(root))
    storage.fs.invalidate_cache()
    lake = lake_format(root)
    table = (
        read_lake(root, QUALITY, lake)
        if lake
        else ds.dataset(
            storage.full(QUALITY),
            filesystem=None if storage.local else storage.fs,
            format="parquet",
            partitioning="hive",
        ).to_table()
    )
    for name in ("source", "object_id"):  # as a partition column, a dictionary or another integer type
        field = QUALITY_SCHEMA.field(name)
        if table.schema.field(name).type != field.type:
            column = table.column(name).cast(pa.string()) if name == "source" else table.column(name)
            table = table.set_column(table.schema.get_field_index(name), name, column.cast(field.type))
    return table.select(QUALITY_SCHEMA.names).sort_by([("param_id", "ascending"), ("day", "ascending")])
