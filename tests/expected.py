"""What the datasets must hold, recomputed from the emulator's pure generator."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl.emulator.data import as_dataset, average_series, candles_series, raw_series
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
