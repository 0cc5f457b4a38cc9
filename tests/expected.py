"""What the datasets must hold, recomputed from the emulator's pure generator."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from etl.emulator.dataset import as_dataset
from etl.emulator.series import average_series, candles_series, raw_series
from etl.storage import Storage
from etl.timeutil import to_ms
from etl.transform import SCHEMAS

KINDS = {"analog": "physical", "signal": "signal", "calculated": "calculated"}


def expected_table(emulator_config, series: str, start: int, end: int, objects=None) -> pa.Table:
    """Every point in [start, end) of every parameter of the objects, in the output schema."""
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
            columns["object_id"].append(np.full(n, object_id, np.int64))
            columns["param_id"].append(np.full(n, pid, np.int64))
            columns["kind"].append(np.full(n, KINDS[ds.param(pid).kind], object))
            columns["ts"].append(ts[keep])
            for name, v in zip(SCHEMAS[series].names[4:], values, strict=True):
                columns[name].append(v[keep])
    return pa.table(
        {name: pa.array(np.concatenate(parts) if parts else [], type=SCHEMAS[series].field(name).type)
         for name, parts in columns.items()},
        schema=SCHEMAS[series],
    )


SERIES = ["raw", "average", "candles"]


def read(root, series: str, fmt: str = "parquet") -> pa.Table:
    """A series dataset (local folder or any fsspec URL) as one table sorted by (param_id, ts)."""
    storage = Storage(str(root))
    storage.fs.invalidate_cache()  # files written by other processes since the last listing
    table = ds.dataset(storage.full(series), filesystem=None if storage.local else storage.fs, format=fmt,
                       partitioning="hive").to_table()
    return table.drop_columns(["date"]).sort_by([("param_id", "ascending"), ("ts", "ascending")])


def assert_exact(root, start: str, end: str, objects=(1, 2), series=SERIES) -> None:
    """Every point of the source in [start, end), exactly once, nothing else."""
    from tests.conftest import emulator_config

    for name in series:
        got = read(root, name)
        want = expected_table(emulator_config(), name, to_ms(start), to_ms(end), objects)
        assert got.num_rows == want.num_rows > 0, name
        assert got.select(want.column_names).equals(want), name
