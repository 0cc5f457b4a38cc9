"""Answers to typed Arrow tables: window-clipped, NaN-free, deduplicated on (param_id, ts), sorted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.client.models import Candles, Points
from etl.plan import WorkUnit

TS = pa.timestamp("ms", tz="UTC")
_KEYS = [("object_id", pa.int64()), ("param_id", pa.int64()), ("kind", pa.string()), ("ts", TS)]
SCHEMAS = {
    "raw": pa.schema([*_KEYS, ("value", pa.float64())]),
    "average": pa.schema([*_KEYS, ("value", pa.float64())]),
    "candles": pa.schema([*_KEYS, *[(c, pa.float64()) for c in ("open", "high", "low", "close")]]),
}
VALUE_COLUMNS = {"raw": ["value"], "average": ["value"], "candles": ["open", "high", "low", "close"]}


@dataclass(slots=True)
class UnitData:
    """The clean columns of one work unit."""

    unit: WorkUnit
    ts: np.ndarray
    values: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.ts)


def clean(unit: WorkUnit, data: Points | Candles, warnings: Counter) -> UnitData:
    """Keep points inside [start, end), with every value present, once per timestamp (first kept)."""
    ts = data.ts
    if len(ts) < 2 or (np.diff(ts) > 0).all():  # the usual answer: ascending, one point per stamp
        lo, hi = (int(i) for i in np.searchsorted(ts, (unit.start, unit.end)))
        values = {c: getattr(data, c)[lo:hi] for c in VALUE_COLUMNS[unit.series]}
        if not any(np.isnan(v).any() for v in values.values()):
            # The closing bound is requested inclusively, so a point exactly at `end` is expected, not odd.
            outside = lo + len(ts) - hi - int(hi < len(ts) and ts[hi] == unit.end)
            if outside:
                warnings["points_outside_window"] += outside
            return UnitData(unit, ts[lo:hi], values)
    return _clean_any(unit, data, warnings)


def _clean_any(unit: WorkUnit, data: Points | Candles, warnings: Counter) -> UnitData:
    columns = VALUE_COLUMNS[unit.series]
    values = {c: getattr(data, c) for c in columns}
    ts = data.ts
    keep = (ts >= unit.start) & (ts < unit.end)
    # The closing bound is requested inclusively, so a point exactly at `end` is expected, not odd.
    outside = int((~keep).sum() - (ts == unit.end).sum())
    if outside:
        warnings["points_outside_window"] += outside
    present = np.ones(len(ts), dtype=bool)
    for c in columns:
        present &= ~np.isnan(values[c])
    missing = int((keep & ~present).sum())
    if missing:
        warnings["points_without_value"] += missing
    keep &= present
    ts = ts[keep]
    values = {c: v[keep] for c, v in values.items()}
    if len(ts) > 1 and not (np.diff(ts) > 0).all():
        order = np.argsort(ts, kind="stable")
        ts = ts[order]
        values = {c: v[order] for c, v in values.items()}
        first = np.concatenate(([True], np.diff(ts) > 0))
        if not first.all():
            warnings["duplicate_points"] += int((~first).sum())
            ts = ts[first]
            values = {c: v[first] for c, v in values.items()}
    return UnitData(unit, ts, values)


def to_table(series: str, pieces: list[UnitData]) -> pa.Table:
    """One table for many units, built column-wise, sorted by (param_id, ts)."""
    schema = SCHEMAS[series]
    pieces = sorted((p for p in pieces if len(p)), key=lambda p: (p.unit.param.id, p.unit.start))
    if not pieces:
        return schema.empty_table()
    lengths = [len(p) for p in pieces]
    kinds = pa.array([p.unit.param.kind for p in pieces], pa.string())
    columns = {
        "object_id": np.repeat(np.array([p.unit.param.object_id for p in pieces], dtype=np.int64), lengths),
        "param_id": np.repeat(np.array([p.unit.param.id for p in pieces], dtype=np.int64), lengths),
        "kind": kinds.take(pa.array(np.repeat(np.arange(len(pieces)), lengths))),
        "ts": pa.array(np.concatenate([p.ts for p in pieces]), TS),
    }
    for c in VALUE_COLUMNS[series]:
        columns[c] = np.concatenate([p.values[c] for p in pieces])
    return pa.table(columns, schema=schema)
