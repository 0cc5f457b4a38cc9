"""Data quality of the raw series: one row per parameter and UTC day, kept by `etl run` beside the data.

A raw slab is one UTC day of a bucket's parameters. While its files are rewritten, each file's observer
(`QualityTracker`, see etl/sinks/rewrite.py) is handed every row of the fed parameters in that file, the
rows kept plus the new ones, so a run that fetches only the last hour still sees the whole day. The
tracker turns them into one quality row per parameter at once, vectorised (a few numbers each), and
`QualitySlabWriter.finish` writes those rows into the quality dataset with the same streaming rewrite
as the series (`{sink.path}/quality/date=.../part-...`), replacing the slab's (parameter, day) rows,
after the raw files and before the coordinator checkpoints the slab: a slab redone after a crash
replaces them again, so the dataset holds exactly one row per (parameter, day). It holds a slab's
parameters' rows at most.

What a row says (README, "Data quality"):

- the span: the part of the UTC day the row describes, from midnight (or the run's window start, when
  it falls inside the day and nothing earlier is stored) to the next midnight (or the run's window end,
  when the day is not over);
- `period_seconds`: the median spacing of the day's points, refined by the mean of the spacings
  within half to one and a half times that median (which keeps gaps and bursts out); none below 2 points;
- `expected_points` = span / period, rounded; `completeness` = points / expected_points, at most 1;
  a day without a point has completeness 0 and no expected_points (the `quality` view of `etl query`
  carries the period of the parameter's nearest day that has one);
- `longest_gap_seconds`: the longest time without a point, the span's edges included (the whole span for
  an empty day); `flatline_seconds`: the longest time between the first and the last point of a run of
  consecutive points with one value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl.model import QUALITY_SCHEMA, QUALITY_TIME_KEY
from etl.sinks.rewrite import Ranges, param_ids, ts_ms
from etl.timeutil import DAY_MS

LOW, HIGH = 0.5, 1.5  # spacings within [LOW, HIGH] x the median refine the period
REFINE = 3  # times: the window is centred again on each refined period
MEDIAN_SAMPLE = 255  # spacings of a group its first estimate is the median of


def _group_starts(groups: np.ndarray, n: int) -> np.ndarray:
    """Where each group 0..n-1 starts in an ascending array of group numbers."""
    return np.searchsorted(groups, np.arange(n), side="left")


def _group_reduce(
    ufunc: np.ufunc, values: np.ndarray, groups: np.ndarray, n: int, empty: float
) -> np.ndarray:
    """ufunc.reduce over each group of contiguous values (groups ascending); `empty` for groups with none."""
    out = np.full(n, empty, np.float64)
    if not len(values):
        return out
    starts = _group_starts(groups, n)
    counts = np.diff(np.r_[starts, len(groups)])
    present = counts > 0
    out[present] = ufunc.reduceat(values.astype(np.float64), starts[present])
    return out


def infer_periods(spacings: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """The sampling period (ms) of each group of spacings (groups ascending): the median, refined by the
    mean of the spacings within [LOW, HIGH] x that estimate (REFINE times, so the window is centred on
    the period rather than on the noisier median); NaN for a group without spacings."""
    median = np.full(n, np.nan)
    if not len(spacings):
        return median
    # The median only seeds the refinement, so it is taken over at most MEDIAN_SAMPLE spacings of each
    # group, evenly strided: a sort of a few thousand numbers instead of a file's millions.
    starts = _group_starts(groups, n)
    counts = np.diff(np.r_[starts, len(groups)])
    stride = np.maximum(-(-counts // MEDIAN_SAMPLE), 1)
    sample = (np.arange(len(groups)) - starts[groups]) % stride[groups] == 0
    # One sort of (group, spacing) packed in an int64 (spacings of a day fit in 32 bits): a lexsort's
    # result at a fraction of its time.
    packed = np.sort(
        (groups[sample].astype(np.int64) << 32) | np.minimum(spacings[sample], 0xFFFFFFFF).astype(np.int64)
    )
    ordered = (packed & 0xFFFFFFFF).astype(np.float64)
    starts = _group_starts(packed >> 32, n)
    counts = np.diff(np.r_[starts, len(packed)])
    present = counts > 0
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    median[present] = (ordered[lo[present]] + ordered[hi[present]]) / 2
    period = median
    for _ in range(REFINE):  # each mean is centred better than the last, so its window is fairer
        around = period[groups]
        near = (spacings >= LOW * around) & (spacings <= HIGH * around)
        total = np.bincount(groups[near], weights=spacings[near], minlength=n)
        count = np.bincount(groups[near], minlength=n)
        period = np.where(count > 0, total / np.maximum(count, 1), period)
    return period


def infer_period(ts: np.ndarray) -> float | None:
    """One series' period in ms (ascending stamps), or None below two points."""
    ts = np.asarray(ts, np.int64)
    if len(ts) < 2:
        return None
    spacings = np.diff(ts)
    return float(infer_periods(spacings, np.zeros(len(spacings), np.int64), 1)[0])


def day_rows(
    rows: pa.Table, ranges: Ranges, params: dict[int, tuple[int, str]], source: str, window: tuple[int, int]
) -> pa.Table:
    """The quality rows (QUALITY_SCHEMA, by param_id) of the parameters in `ranges`, whose every raw row
    of one UTC day is in `rows` (sorted by param_id, ts; rows of other parameters are ignored).
    `params`: each parameter's object and kind; `window`: the run's [start, end)."""
    ids = np.unique(ranges.param_id)
    n = len(ids)
    range_group = np.searchsorted(ids, ranges.param_id)
    first_start = _group_reduce(np.minimum, ranges.start, range_group, n, np.inf).astype(np.int64)
    last_end = _group_reduce(np.maximum, ranges.end, range_group, n, -np.inf).astype(np.int64)
    day0 = first_start // DAY_MS * DAY_MS
    day1 = day0 + DAY_MS

    pids = param_ids(rows) if rows.num_rows else np.empty(0, np.int64)
    mine = np.isin(pids, ids)
    pids = pids[mine]
    ts = ts_ms(rows)[mine] if rows.num_rows else np.empty(0, np.int64)
    values = (
        rows.column("value").combine_chunks().to_numpy(zero_copy_only=False)[mine]
        if rows.num_rows
        else np.empty(0, np.float64)
    )
    group = np.searchsorted(ids, pids)
    points = np.bincount(group, minlength=n)
    has = points > 0
    first_ts = last_ts = np.zeros(n, np.int64)
    if len(ts):
        starts = _group_starts(group, n)
        first_ts = np.where(has, ts[np.minimum(starts, len(ts) - 1)], 0)
        last_ts = np.where(has, ts[np.clip(starts + points - 1, 0, len(ts) - 1)], 0)

    # The span: from midnight, unless the run's window starts inside the day and nothing earlier is here;
    # to the next midnight, unless the window ends inside the day (today) and nothing later is here.
    begin = np.minimum(np.minimum(first_start, window[0]), np.where(has, first_ts, np.iinfo(np.int64).max))
    span_start = np.maximum(day0, begin)
    span_end = np.minimum(day1, np.maximum(np.maximum(last_end, window[1]), np.where(has, last_ts + 1, 0)))
    span = np.maximum(span_end - span_start, 0)

    inner = group[1:] == group[:-1] if len(group) else np.empty(0, bool)
    spacings = np.diff(ts)[inner] if len(ts) else np.empty(0, np.int64)
    spacing_group = group[1:][inner] if len(group) else np.empty(0, np.int64)
    period = infer_periods(spacings, spacing_group, n)
    widest = _group_reduce(np.maximum, spacings, spacing_group, n, 0.0)
    edges = np.maximum(first_ts - span_start, span_end - last_ts)
    longest_gap = np.where(has, np.maximum(widest, edges), span)

    # Runs of one value: a new run wherever the value or the parameter changes.
    if len(values):
        change = np.r_[True, (values[1:] != values[:-1]) | ~inner]
        run_start = np.flatnonzero(change)
        run_end = np.r_[run_start[1:], len(values)] - 1
        flat = _group_reduce(np.maximum, ts[run_end] - ts[run_start], group[run_start], n, 0.0)
    else:
        flat = np.zeros(n)

    known = ~np.isnan(period)
    expected = np.where(known, np.rint(span / np.where(known, period, 1.0)), 0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(expected > 0, np.minimum(points / np.maximum(expected, 1), 1.0), 1.0)
    completeness = np.where(~has, 0.0, np.where(known, ratio, np.nan))

    objects = [params.get(int(p), (0, ""))[0] for p in ids]
    kinds = [str(params.get(int(p), (0, ""))[1]) for p in ids]
    columns = {
        "source": pa.array([source] * n, pa.string()),
        "object_id": pa.array(objects, pa.int64()),
        "param_id": pa.array(ids, pa.int64()),
        "kind": pa.array(kinds, pa.string()),
        QUALITY_TIME_KEY: pa.array(day0, pa.int64()).cast(QUALITY_SCHEMA.field(QUALITY_TIME_KEY).type),
        "points": pa.array(points, pa.int64()),
        "expected_points": pa.array(expected, pa.int64(), mask=~known),
        "completeness": pa.array(completeness, pa.float64(), mask=np.isnan(completeness)),
        "longest_gap_seconds": pa.array(longest_gap / 1000, pa.float64()),
        "flatline_seconds": pa.array(flat / 1000, pa.float64()),
        "first_ts": pa.array(first_ts, pa.int64(), mask=~has).cast(QUALITY_SCHEMA.field("first_ts").type),
        "last_ts": pa.array(last_ts, pa.int64(), mask=~has).cast(QUALITY_SCHEMA.field("last_ts").type),
        "period_seconds": pa.array(period / 1000, pa.float64(), mask=~known),
        "span_seconds": pa.array(span / 1000, pa.float64()),
    }
    return pa.table(columns, schema=QUALITY_SCHEMA)
