"""What the datasets must hold, recomputed from the emulator's pure generator (no server, no file)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl.model import SCHEMAS, Series
from etl_emulator.dataset import as_dataset
from etl_emulator.series import average_series, candles_series, raw_series

KINDS = {"analog": "physical", "signal": "signal", "calculated": "calculated"}
SERIES = ["raw", "average", "candles"]
SOURCE = "127.0.0.1"  # the emulator's host: the default source name


def expected_table(
    emulator_config, series: str, start: int, end: int, objects=None, source: str = SOURCE, now=None
) -> pa.Table:
    """Every point in [start, end) of every parameter of the objects, in the output schema, as the
    platform shows them at `now` (default: the config's clock)."""
    series = Series(series)
    ds = as_dataset(emulator_config)
    now = now if now is not None else getattr(emulator_config, "now_ms", None)
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
