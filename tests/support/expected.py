"""What the datasets must hold, recomputed from the emulator's pure generator."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from etl.model import SCHEMAS, Series
from etl.storage.files import Storage
from etl.timeutil import to_ms
from etl_emulator.dataset import as_dataset
from etl_emulator.series import average_series, candles_series, raw_series

KINDS = {"analog": "physical", "signal": "signal", "calculated": "calculated"}


SOURCE = "127.0.0.1"  # the emulator's host: the default source name


def expected_table(
    emulator_config, series: str, start: int, end: int, objects=None, source: str = SOURCE
) -> pa.Table:
    """Every point in [start, end) of every parameter of the objects, in the output schema."""
    series = Series(series)
    ds = as_dataset(emulator_config)
    now = getattr(emulator_config, "now_ms", None)
    columns: dict[str, list] = {name: [] for name in SCHEMAS[series].names}
    for object_id in objects or ds.object_ids:
        for pid in sorted(ds.physical_ids(object_id) + ds.calc_ids(object_id)):
            if series == "raw":
                ts, *values = raw_series(ds, pid, start, end, now)
            elif series == "average":
                ts, *values = average_series(ds, pid, start, end, now)
            else:
                ts, *values = candles_series(ds, pid, start, end, now)
            keep = ts < end
            n = int(keep.sum())
            columns["source"].append(np.full(n, source, object))
            columns["object_id"].append(np.full(n, object_id, np.int64))
            columns["param_id"].append(np.full(n, pid, np.int64))
            columns["kind"].append(np.full(n, KINDS[ds.param(pid).kind], object))
            columns["ts"].append(ts[keep])
            for name, v in zip(series.value_columns, values, strict=True):
                columns[name].append(v[keep])
    return pa.table(
        {
            name: pa.array(np.concatenate(parts) if parts else [], type=SCHEMAS[series].field(name).type)
            for name, parts in columns.items()
        },
        schema=SCHEMAS[series],
    )


SERIES = ["raw", "average", "candles"]


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
    """delta or iceberg when the output holds lake tables (read through their snapshots, not files)."""
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


def assert_exact(root, start: str, end: str, objects=(1, 2), series=SERIES) -> None:
    """Every point of the source in [start, end), exactly once, nothing else."""
    from tests.conftest import emulator_config

    for name in series:
        got = read(root, name)
        want = expected_table(emulator_config(), name, to_ms(start), to_ms(end), objects)
        assert got.num_rows == want.num_rows > 0, name
        assert got.select(want.column_names).equals(want), name


# -- the quality dataset --------------------------------------------------------------------------------


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


def day_facts(emulator_config, param_id: int, day_start: int) -> dict:
    """What a quality row must say of a parameter's UTC day, computed from the generator alone: its points,
    first and last stamps, longest time without a point (the day's edges included), longest run of one
    value, its true period and its gap of the day."""
    from etl.timeutil import DAY_MS
    from etl_emulator.series import gaps

    ds_ = as_dataset(emulator_config)
    param = ds_.param(param_id)
    ts, values = raw_series(ds_, param_id, day_start, day_start + DAY_MS - 1)
    spacings = np.diff(np.r_[day_start, ts, day_start + DAY_MS])
    runs = np.flatnonzero(np.r_[True, values[1:] != values[:-1]]) if len(values) else np.empty(0, np.int64)
    ends = np.r_[runs[1:], len(values)] - 1
    [gap] = gaps(ds_, param_id, day_start, day_start + DAY_MS - 1)
    return {
        "points": len(ts),
        "first_ts": int(ts[0]) if len(ts) else None,
        "last_ts": int(ts[-1]) if len(ts) else None,
        "longest_gap_seconds": float(spacings.max()) / 1000,
        "flatline_seconds": float((ts[ends] - ts[runs]).max()) / 1000 if len(ts) else 0.0,
        "period_seconds": param.period_ms / 1000,
        "gap_seconds": (gap[1] - gap[0]) / 1000,
        "kind": KINDS[param.kind],
    }
