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
import pyarrow.compute as pc

from etl.model import PARAM_KINDS, QUALITY_SCHEMA, QUALITY_TIME_KEY, Series, Windows, batches
from etl.sinks.files import SlabWriter
from etl.sinks.formats import FileFormat
from etl.sinks.layout import Layout
from etl.sinks.rewrite import Ranges, param_ids, ts_ms
from etl.storage.files import Storage
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


COMPACT_PARTS = 32


class QualityTracker:
    """The observer of a raw slab's file rewrites: the quality rows of the parameters they write."""

    def __init__(self, windows: Windows, source: str, window: tuple[int, int]) -> None:
        order = np.argsort(windows.param_id, kind="stable")
        self._ids, self._objects, self._kinds = (
            windows.param_id[order],
            windows.object_id[order],
            windows.kind[order],
        )
        self.source = source
        self.window = window
        self.parts: list[pa.Table] = []  # compacted, then the latest small ones
        self._small = 0

    def __call__(self, rows: pa.Table, ranges: Ranges) -> None:
        if len(ranges):
            self.parts.append(day_rows(rows, ranges, self._params(ranges.param_id), self.source, self.window))
            self._small += 1
            if self._small == COMPACT_PARTS:  # one table, not dozens of small ones with their own buffers
                self.parts[-COMPACT_PARTS:] = [pa.concat_tables(self.parts[-COMPACT_PARTS:]).combine_chunks()]
                self._small = 0

    def _params(self, ids: np.ndarray) -> dict[int, tuple[int, str]]:
        """Object and kind of these parameters (a file's, not the whole slab's)."""
        ids = np.unique(ids)
        at = np.minimum(np.searchsorted(self._ids, ids), max(len(self._ids) - 1, 0))
        known = self._ids[at] == ids if len(self._ids) else np.zeros(len(ids), bool)
        return {
            p: (o, PARAM_KINDS[k].value)
            for p, o, k in zip(
                ids[known].tolist(),
                self._objects[at][known].tolist(),
                self._kinds[at][known].tolist(),
                strict=True,
            )
        }

    def result(self, by_object: bool) -> tuple[pa.Table, Windows]:
        """The rows in write order, and the (parameter, day) windows they replace."""
        if not self.parts:
            return QUALITY_SCHEMA.empty_table(), Windows.of(Series.RAW, [])
        table = pa.concat_tables(self.parts)
        keys = [("object_id", "ascending")] if by_object else []
        table = table.sort_by([*keys, ("param_id", "ascending"), (QUALITY_TIME_KEY, "ascending")])
        days = ts_ms(table, QUALITY_TIME_KEY)
        kinds = pc.index_in(table.column("kind"), pa.array([k.value for k in PARAM_KINDS])).to_numpy(
            zero_copy_only=False
        )
        return table, Windows(
            Series.RAW, param_ids(table), table.column("object_id").to_numpy(), kinds, days, days + DAY_MS
        )

    @property
    def rows(self) -> int:
        return sum(p.num_rows for p in self.parts)

    @property
    def lowest_completeness(self) -> float | None:
        lows = [
            float(np.nanmin(c))
            for p in self.parts
            if len(c := p.column("completeness").to_numpy(zero_copy_only=False)) and not np.isnan(c).all()
        ]
        return min(lows) if lows else None


QUALITY_BATCH = 1024  # quality rows handed to the writer at a time


class QualitySlabWriter(SlabWriter):
    """A raw slab's writer that also writes the quality rows of the parameters it wrote, once its own
    files are swapped in (the coordinator checkpoints the slab after both)."""

    def __init__(
        self,
        storage: Storage,
        fmt: FileFormat,
        layout: Layout,
        bucket: int,
        quality: Layout,
        tracker: QualityTracker,
    ) -> None:
        super().__init__(storage, fmt, layout, bucket, tracker)
        self.tracker = tracker
        self.quality = SlabWriter(storage, fmt, quality, bucket)
        self.quality_files: list[str] = []

    def finish(self) -> list[str]:
        files = super().finish()
        try:
            table, windows = self.tracker.result(self.quality.layout.by_object)
            for lo, hi in batches(windows.param_id, QUALITY_BATCH):  # a slab's rows, a bounded part at a time
                self.quality.write(table.slice(lo, hi - lo), list(windows[lo:hi]))
            self.quality_files = self.quality.finish()
        except BaseException:
            self.quality.abort()
            raise
        return files

    def abort(self) -> None:
        super().abort()
        self.quality.abort()

    @property
    def quality_rows(self) -> int:
        return self.tracker.rows

    @property
    def lowest_completeness(self) -> float | None:
        return self.tracker.lowest_completeness


# -- reading -------------------------------------------------------------------------------------------

_VIEW = """
create view quality as
with typed as (
    select cast(source as varchar) as source, cast(object_id as bigint) as object_id,
           cast(param_id as bigint) as param_id, cast(kind as varchar) as kind, cast(date as date) as date,
           cast(points as bigint) as points, cast(expected_points as bigint) as expected_points,
           cast(completeness as double) as completeness, cast(longest_gap_seconds as double) as longest_gap_seconds,
           cast(flatline_seconds as double) as flatline_seconds, cast(first_ts as timestamptz) as first_ts,
           cast(last_ts as timestamptz) as last_ts, cast(period_seconds as double) as period_seconds,
           cast(span_seconds as double) as span_seconds
    from {relation}
), carried as (
    select *, coalesce(period_seconds,
        last_value(period_seconds ignore nulls) over (partition by source, param_id order by date
                                                      rows between unbounded preceding and 1 preceding),
        first_value(period_seconds ignore nulls) over (partition by source, param_id order by date
                                                       rows between 1 following and unbounded following)
    ) as period
    from typed
)
select source, object_id, param_id, kind, date, points,
       coalesce(expected_points, cast(round(span_seconds / period) as bigint)) as expected_points,
       coalesce(completeness, case when points = 0 then 0.0
                                   when round(span_seconds / period) >= 1
                                   then least(1.0, points / round(span_seconds / period))
                                   when period is not null then 1.0 end) as completeness,
       longest_gap_seconds, flatline_seconds, first_ts, last_ts, period as period_seconds,
       period_seconds is null and period is not null as period_carried, span_seconds
from carried
"""


def create_quality_view(con, relation: str) -> None:
    """The `quality` view of `etl query` over a DuckDB relation of the dataset's files: typed columns
    (CSV too), `date` from the partition, and for days whose period could not be inferred (fewer than 2
    points) the period of the parameter's nearest earlier day that has one (else the nearest later one),
    which fills their expected_points and completeness (`period_carried` says so)."""
    con.sql(_VIEW.format(relation=relation))
