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
  consecutive points with one value;
- `late_points`: points fetched after a run had read past their stamps (they reached the platform
  late), over every run that fetched the day; `late_seconds`: the longest of them took at least this
  long (from its stamp to the end of the last run that read past it without it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from etl.model import QUALITY_SCHEMA, QUALITY_TIME_KEY
from etl.sinks.rewrite import Ranges, param_ids, ts_ms
from etl.state.arrivals import Rows
from etl.state.coverage import NONE
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


def _segment_reduce(ufunc: np.ufunc, values: np.ndarray, counts: np.ndarray, empty: float) -> np.ndarray:
    """`_group_reduce` of values that come as consecutive segments of `counts` values each, reduced in
    their own type (maximum and minimum commute with the conversion to float)."""
    out = np.full(len(counts), empty, np.float64)
    present = counts > 0
    if present.any():
        out[present] = ufunc.reduceat(values, (np.cumsum(counts) - counts)[present])
    return out


def infer_periods(spacings: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """The sampling period (ms) of each group of spacings (groups ascending): the median, refined by the
    mean of the spacings within [LOW, HIGH] x that estimate (REFINE times, so the window is centred on
    the period rather than on the noisier median); NaN for a group without spacings."""
    starts = _group_starts(groups, n)
    return _periods(spacings, np.diff(np.r_[starts, len(groups)]))


def _periods(spacings: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`infer_periods` of spacings that come as consecutive segments, `counts[i]` of group i."""
    n = len(counts)
    median = np.full(n, np.nan)
    if not len(spacings):
        return median
    # The median only seeds the refinement, so it is taken over at most MEDIAN_SAMPLE spacings of each
    # group, evenly strided: a sort of a few thousand numbers instead of a file's millions.
    starts = np.cumsum(counts) - counts
    stride = np.maximum(-(-counts // MEDIAN_SAMPLE), 1)
    taken = -(-counts // stride)  # every stride-th spacing of a group, from its first
    first = np.cumsum(taken) - taken
    sample = np.repeat(starts, taken) + (
        np.arange(first[-1] + taken[-1]) - np.repeat(first, taken)
    ) * np.repeat(stride, taken)
    # One sort of (group, spacing) packed in an int64 (spacings of a day fit in 32 bits): a lexsort's
    # result at a fraction of its time.
    packed = np.sort(
        (np.repeat(np.arange(n, dtype=np.int64), taken) << 32)
        | np.minimum(spacings[sample], 0xFFFFFFFF).astype(np.int64)
    )
    ordered = (packed & 0xFFFFFFFF).astype(np.float64)
    starts = _group_starts(packed >> 32, n)
    counts_sampled = np.diff(np.r_[starts, len(packed)])
    present = counts_sampled > 0
    lo, hi = starts + (counts_sampled - 1) // 2, starts + counts_sampled // 2
    median[present] = (ordered[lo[present]] + ordered[hi[present]]) / 2
    low, high = int(spacings.min()), int(spacings.max())
    if len(spacings) * max(-low, high) < 2**53:
        return _refine(spacings, counts, median)
    return _refine_any(spacings, np.repeat(np.arange(n), counts), n, median)


def _refine(spacings: np.ndarray, counts: np.ndarray, period: np.ndarray) -> np.ndarray:
    """The REFINE means, in integers: with every partial sum below 2**53 (the caller checks) the float
    sums and comparisons of `_refine_any` are exact, so these are the same numbers, from a few passes
    over the spacings into buffers made once (each fresh large array is a mapping to fault in:
    etl/support/allocator.py) instead of gathers, masks and weighted bincounts."""
    n = len(counts)
    present = counts > 0
    starts = (np.cumsum(counts) - counts)[present]
    group = np.repeat(np.arange(n), counts)
    bound = np.empty(len(spacings), np.int64)
    near, below = np.empty(len(spacings), bool), np.empty(len(spacings), bool)
    total, count = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for _ in range(REFINE):
        known = ~np.isnan(period)  # every group with spacings has a median
        # An integer spacing s has s >= x exactly when s >= ceil(x), and s <= x when s <= floor(x).
        low = np.where(known, np.ceil(LOW * np.where(known, period, 0)), 1).astype(np.int64)
        high = np.where(known, np.floor(HIGH * np.where(known, period, 0)), 0).astype(np.int64)
        # (take with mode="raise", and reduceat casting the mask, would each make a fresh array)
        np.greater_equal(spacings, np.take(low, group, out=bound, mode="clip"), out=near)
        np.less_equal(spacings, np.take(high, group, out=bound, mode="clip"), out=below)
        near &= below
        np.copyto(bound, near)
        count[present] = np.add.reduceat(bound, starts)
        total[present] = np.add.reduceat(np.multiply(spacings, near, out=bound), starts)
        period = np.where(count > 0, total / np.maximum(count, 1), period)
    return period


def _refine_any(spacings: np.ndarray, groups: np.ndarray, n: int, period: np.ndarray) -> np.ndarray:
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


def _columns(rows: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """param_id, ts (epoch ms) and value, as views of the table's buffers where they can be."""
    if not rows.num_rows:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    values = rows.column("value")
    if values.num_chunks == 1 and not values.null_count:
        value = values.chunk(0).to_numpy()
    else:
        value = values.combine_chunks().to_numpy(zero_copy_only=False)
    return param_ids(rows), ts_ms(rows), value


def _flatlines(ts: np.ndarray, values: np.ndarray, inner: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Each parameter's longest run of one value: the time from its first point to its last (0 without
    a run of two points or more). `inner`: which consecutive rows are of one parameter; `points`: how
    many rows each parameter has, in order."""
    n = len(points)
    if not len(values):
        return np.zeros(n)
    # Links between consecutive rows of one parameter and one value; a run of links is a run of points.
    links = np.flatnonzero((values[1:] == values[:-1]) & inner)
    if not len(links):
        return np.zeros(n)
    first = np.flatnonzero(np.r_[True, np.diff(links) != 1])
    start, end = links[first], links[np.r_[first[1:] - 1, len(links) - 1]] + 1
    lasting = ts[end] - ts[start]
    if (lasting < 0).any():  # stamps that go back (a file not written by etl): one-point runs' 0 counts too
        group = np.repeat(np.arange(n), points)
        change = np.r_[True, (values[1:] != values[:-1]) | ~inner]
        run_start = np.flatnonzero(change)
        run_end = np.r_[run_start[1:], len(values)] - 1
        return _group_reduce(np.maximum, ts[run_end] - ts[run_start], group[run_start], n, 0.0)
    lo = np.cumsum(points) - points  # the last parameter starting at or before a run's start holds it
    return _group_reduce(np.maximum, lasting, np.searchsorted(lo, start, side="right") - 1, n, 0.0)


@dataclass(frozen=True)
class Known:
    """What a run knew of a raw slab's parameters before it: each one's newest point received
    (`param_id` sorted), the time the checkpoints covered within the slab's span (`covered`: param_id,
    start, end, sorted), and the late figures of the span's days so far (`prior`: per parameter and day).
    A point fetched now arrived late when it lies in covered time, after the newest point then received:
    a run read past its stamp without it. Time never covered (a first load, history filled behind the
    newest data) holds no late point."""

    param_id: np.ndarray
    newest: np.ndarray
    covered: tuple[np.ndarray, np.ndarray, np.ndarray]
    prior: Rows = field(default_factory=lambda: Rows.empty(2))

    @classmethod
    def empty(cls) -> Known:
        return cls(_NO_IDS, _NO_IDS, (_NO_IDS, _NO_IDS, _NO_IDS))

    def _newest(self, ids: np.ndarray) -> np.ndarray:
        if not len(self.param_id):
            return np.full(len(ids), NONE, np.int64)
        at = np.minimum(np.searchsorted(self.param_id, ids), len(self.param_id) - 1)
        return np.where(self.param_id[at] == ids, self.newest[at], NONE)

    def gaps(self) -> bool:
        """Whether some covered time lies after its parameter's newest point, where a point can have
        arrived late (none in a first run, nor after a full refresh)."""
        pid, _, end = self.covered
        return bool(len(pid)) and bool((end > self._newest(pid) + 1).any())

    def late(self, pids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Of fetched rows (sorted by param_id, ts), how late each arrived at least (ms: from its stamp to
        the end of the covered time it lies in), or -1 when it is not late."""
        cp, cs, ce = self.covered
        out = np.full(len(ts), -1, np.int64)
        if not len(cp) or not len(ts):
            return out
        # The covered interval each row may lie in: the last one of its parameter starting at or before it,
        # found by sorting interval starts and rows together (a start before a row at the same instant).
        n = len(cp)
        first = np.r_[np.zeros(n, np.int8), np.ones(len(ts), np.int8)]
        order = np.lexsort((first, np.r_[cs, ts], np.r_[cp, pids]))
        interval = order < n
        last = np.maximum.accumulate(np.where(interval, np.arange(len(order)), -1))  # in sorted order
        at = np.empty(len(ts), np.int64)
        at[order[~interval] - n] = np.where(last[~interval] >= 0, order[np.maximum(last[~interval], 0)], -1)
        found = at >= 0
        at = np.where(found, at, 0)
        found &= cp[at] == pids
        inside = found & (ts < ce[at]) & (ts > self._newest(pids))
        out[inside] = ce[at][inside] - ts[inside]
        return out

    def prior_of(self, ids: np.ndarray, day: int) -> tuple[np.ndarray, np.ndarray]:
        """The late points and longest delay (ms) the day held for each parameter before this run."""
        rows = self.prior.take(self.prior.at == day)
        points, delay = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
        if len(rows):
            at = np.minimum(np.searchsorted(rows.param_id, ids), len(rows) - 1)
            found = rows.param_id[at] == ids
            points[found], delay[found] = rows.values[0][at][found], rows.values[1][at][found]
        return points, delay


_NO_IDS = np.empty(0, np.int64)


def late_figures(
    rows: pa.Table, ranges: Ranges, ids: np.ndarray, known: Known | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per parameter of `ids` (sorted): late points and their longest delay fetched now, and with the
    day's earlier ones."""
    new_points = np.zeros(len(ids), np.int64)
    new_ms = np.zeros(len(ids), np.int64)
    if known is None or not len(ids):
        return new_points, new_ms, new_points, new_ms
    day = int(ranges.start[0]) // DAY_MS * DAY_MS if len(ranges) else 0
    if not known.gaps():  # nothing fetched now can be late: only the day's earlier figures
        prior_points, prior_ms = known.prior_of(ids, day)
        return new_points, new_ms, prior_points, prior_ms
    fetched = ranges.mask(rows)
    pids, ts = param_ids(rows)[fetched], ts_ms(rows, "ts")[fetched]
    delay = known.late(pids, ts)
    late = delay >= 0
    if late.any():
        group = np.searchsorted(ids, pids[late])
        new_points = np.bincount(group, minlength=len(ids)).astype(np.int64)
        np.maximum.at(new_ms, group, delay[late])
    prior_points, prior_ms = known.prior_of(ids, day)
    return new_points, new_ms, prior_points + new_points, np.maximum(prior_ms, new_ms)


def day_rows(
    rows: pa.Table,
    ranges: Ranges,
    params: dict[int, tuple[int, str]],
    source: str,
    window: tuple[int, int],
    late: tuple[np.ndarray, np.ndarray] | None = None,
) -> pa.Table:
    """The quality rows (QUALITY_SCHEMA, by param_id) of the parameters in `ranges`, whose every raw row
    of one UTC day is in `rows` (sorted by param_id, ts; rows of other parameters are ignored).
    `params`: each parameter's object and kind; `window`: the run's [start, end); `late`: each
    parameter's late points and their longest delay (ms), in the order of its sorted ids."""
    ids = np.unique(ranges.param_id)
    n = len(ids)
    range_group = np.searchsorted(ids, ranges.param_id)
    first_start = _group_reduce(np.minimum, ranges.start, range_group, n, np.inf).astype(np.int64)
    last_end = _group_reduce(np.maximum, ranges.end, range_group, n, -np.inf).astype(np.int64)
    day0 = first_start // DAY_MS * DAY_MS
    day1 = day0 + DAY_MS

    pids, ts, values = _columns(rows)
    # Each parameter's rows are one run of the sorted param_id column, found by bisection.
    lo, hi = np.searchsorted(pids, ids, side="left"), np.searchsorted(pids, ids, side="right")
    if (hi - lo).sum() != len(pids):  # rows of parameters not fed: left out
        mine = np.isin(pids, ids)
        pids, ts, values = pids[mine], ts[mine], values[mine]
        lo, hi = np.searchsorted(pids, ids, side="left"), np.searchsorted(pids, ids, side="right")
    points = hi - lo
    has = points > 0
    first_ts = last_ts = np.zeros(n, np.int64)
    if len(ts):
        first_ts = np.where(has, ts[np.minimum(lo, len(ts) - 1)], 0)
        last_ts = np.where(has, ts[np.clip(hi - 1, 0, len(ts) - 1)], 0)

    # The span: from midnight, unless the run's window starts inside the day and nothing earlier is here;
    # to the next midnight, unless the window ends inside the day (today) and nothing later is here.
    begin = np.minimum(np.minimum(first_start, window[0]), np.where(has, first_ts, np.iinfo(np.int64).max))
    span_start = np.maximum(day0, begin)
    span_end = np.minimum(day1, np.maximum(np.maximum(last_end, window[1]), np.where(has, last_ts + 1, 0)))
    span = np.maximum(span_end - span_start, 0)

    # Spacings within a parameter: all of them but those from one parameter's last row to the next's first.
    between = lo[has][1:] - 1
    spacings = np.diff(ts)
    inner = np.ones(len(spacings), bool)
    inner[between] = False
    if len(between):
        spacings = spacings[inner]
    gaps = np.maximum(points - 1, 0)  # spacings of each parameter, consecutive in `spacings`
    period = _periods(spacings, gaps)
    widest = _segment_reduce(np.maximum, spacings, gaps, 0.0)
    edges = np.maximum(first_ts - span_start, span_end - last_ts)
    longest_gap = np.where(has, np.maximum(widest, edges), span)
    flat = _flatlines(ts, values, inner, points)

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
        "late_points": pa.array(late[0] if late is not None else np.zeros(n, np.int64), pa.int64()),
        "late_seconds": pa.array(
            late[1] / 1000 if late is not None else np.zeros(n),
            pa.float64(),
            mask=(late[0] == 0) if late is not None else np.ones(n, bool),
        ),
    }
    return pa.table(columns, schema=QUALITY_SCHEMA)
