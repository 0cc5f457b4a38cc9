"""Gaps in a series: spacings well above its sampling period (etl.quality.rows.infer_period), so charts
break their lines there instead of drawing a straight line across missing data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from etl.quality.rows import infer_period

GAP_FACTOR = 2.5  # a spacing this many periods long is a gap (jitter stays well below it)


def gap_positions(ts_ms: np.ndarray, factor: float = GAP_FACTOR) -> np.ndarray:
    """Indices i where the spacing ts[i+1] - ts[i] is a gap."""
    period = infer_period(ts_ms)
    if period is None:
        return np.empty(0, np.int64)
    return np.flatnonzero(np.diff(ts_ms) > factor * period)


def with_breaks(
    frame: pd.DataFrame, factor: float = GAP_FACTOR
) -> tuple[pd.DataFrame, list[tuple[pd.Timestamp, pd.Timestamp]]]:
    """The frame (sorted by `ts`) with a row of missing values in each gap, and the gaps' (start, end)."""
    ts = frame["ts"]
    stamps = ts.astype("int64").to_numpy() // (
        10**6 if ts.dt.unit == "ns" else 10**3 if ts.dt.unit == "us" else 1
    )
    at = gap_positions(stamps, factor)
    if not len(at):
        return frame, []
    gaps = [(ts.iloc[i], ts.iloc[i + 1]) for i in at]
    filler = frame.iloc[at].copy()
    for column in frame.columns:
        if column != "ts" and pd.api.types.is_float_dtype(frame[column]):
            filler[column] = np.nan
    filler["ts"] = [start + pd.Timedelta(milliseconds=1) for start, _ in gaps]  # steps stop at the last point
    out = pd.concat([frame, filler]).sort_values("ts", kind="stable").reset_index(drop=True)
    return out, gaps
