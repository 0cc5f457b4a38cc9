"""Which windows to fetch, grouped into slabs, made lazily in order of their spans' ends.

A slab is one series over an aligned span of time (a UTC day for raw, `extract.aggregate_window` for
average and candles) for the parameters of one file bucket (`etl.sinks.layout`): it rewrites exactly
that bucket's files in the span's partitions, so slabs are written independently and a slab redone
after a crash replaces exactly what it wrote before. A slab names at most a bucket's parameters times
the windows of a span; it is fetched and written a batch at a time (etl/pipeline/slab.py).

Planning is column-wise: the gaps between what is covered and the run's window are computed for the
whole fleet at once with numpy, and `Window` objects exist only for the slabs being worked on, so
planning does not grow with the history's length (tests/unit/state/test_state_scale.py plans a year of 100,000
parameters).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from etl.model import SERIES, Params, Series, Windows, bucket_of, requests_of, union
from etl.pipeline.clean import WindowData
from etl.quality.rows import Known
from etl.state import Coverage
from etl.state.arrivals import Arrivals, Rows
from etl.state.coverage import NONE
from etl.timeutil import DAY_MS, MINUTE_MS, SECOND_MS

# A window is covered only up to what the server could have served when it was asked: its clock at the
# run's sign-in, less this margin, whatever window.end or --to say. The server's clock comes from its Date
# header (whole seconds, cut down), or is ours when it sends none, which NTP keeps within a second but an
# unsynchronised machine lets drift: a minute covers both. Points that reach the server late are the
# job of the tails (etl/pipeline/late.py), not the margin's; the margin costs nothing, as the next run
# starts there.
HORIZON_MARGIN_MS = MINUTE_MS


def horizon(server_now: int) -> int:
    """The latest end a window may be checkpointed with, given the server's time now (whole seconds, as
    the Date header tells it)."""
    return (server_now - HORIZON_MARGIN_MS) // SECOND_MS * SECOND_MS


def not_due(coverage: Coverage, series: Series, ids: np.ndarray, end: int, every: int) -> np.ndarray:
    """Which of these parameters' series were asked less than `every` before `end` (`cadence.series`):
    their new time, and the late-data tails behind it, wait."""
    high = coverage.high_waters(series, ids)
    waiting: np.ndarray = (high != NONE) & (end - high < every)
    return waiting


@dataclass(frozen=True)
class Slab:
    series: Series
    start: int
    end: int  # the span, [start, end)
    bucket: int
    windows: Windows  # in write order: (object_id when partitioned by it,) param_id, start
    known: Known | None = None  # raw slabs: what tells the points that arrive late (etl/quality/rows.py)
    history: np.ndarray | None = None  # which windows lie behind their parameter's frontier (a backfill)
    averages: dict[int, WindowData] | None = None  # answers the probes got already (etl/pipeline/late.py)


@dataclass(frozen=True)
class PlanOptions:
    start: int
    end: int
    full_refresh: bool = False
    overlap: int = 0  # re-read this much before each high-water mark (late points)


@dataclass(frozen=True)
class Spans:
    """How a series is cut: slabs of `span`, requests of `unit` (which divides `span`)."""

    span: int
    unit: int


class Fleet:
    """The parameters of a run, column-wise and sorted by id, with each one's file bucket."""

    def __init__(self, params: Params, buckets: int) -> None:
        self.ids, self.objects, self.kinds = params.id, params.object_id, params.kind
        self.buckets = np.fromiter(
            (bucket_of(i, buckets) for i in self.ids.tolist()), np.int64, len(self.ids)
        )

    def __len__(self) -> int:
        return len(self.ids)


def needed(
    coverage: Coverage, series: Series, ids: np.ndarray, options: PlanOptions
) -> tuple[np.ndarray, ...]:
    """(param_id, start, end) to fetch for each parameter in `ids` (sorted): the window minus what is
    covered, plus the overlap stretch behind a high-water mark inside the window; sorted, merged."""
    ws, we = options.start, options.end
    if options.full_refresh or not len(ids):
        return ids, np.full(len(ids), ws, np.int64), np.full(len(ids), we, np.int64)
    cp, cs, ce = coverage.of_series(series)
    mine = np.isin(cp, ids)
    cp, cs, ce = cp[mine], cs[mine], ce[mine]
    last = np.r_[cp[1:] != cp[:-1], True] if len(cp) else np.empty(0, bool)
    high_water_ids, high_water = cp[last], ce[last]
    inside = (ce > ws) & (cs < we)
    cp, cs, ce = cp[inside], np.maximum(cs[inside], ws), np.minimum(ce[inside], we)
    first = np.r_[True, cp[1:] != cp[:-1]] if len(cp) else np.empty(0, bool)
    final = np.r_[cp[1:] != cp[:-1], True] if len(cp) else np.empty(0, bool)
    between = ~final  # a row and the next one of the same parameter: the gap from one to the other
    untouched = ids[~np.isin(ids, cp)]
    gap_p = np.concatenate([untouched, cp[first & (cs > ws)], cp[between], cp[final & (ce < we)]])
    gap_s = np.concatenate(
        [
            np.full(len(untouched), ws),
            np.full(int((first & (cs > ws)).sum()), ws),
            ce[between],
            ce[final & (ce < we)],
        ]
    )
    gap_e = np.concatenate(
        [
            np.full(len(untouched), we),
            cs[first & (cs > ws)],
            cs[1:][between[:-1]] if len(cs) else cs,
            np.full(int((final & (ce < we)).sum()), we),
        ]
    )
    if options.overlap:
        # Late points land just behind the last high-water mark: read that stretch again.
        lagging = (high_water > ws) & (high_water < we) & np.isin(high_water_ids, gap_p)
        gap_p = np.r_[gap_p, high_water_ids[lagging]]
        gap_s = np.r_[gap_s, np.maximum(ws, high_water[lagging] - options.overlap)]
        gap_e = np.r_[gap_e, high_water[lagging]]
    return union(gap_p.astype(np.int64), gap_s.astype(np.int64), gap_e.astype(np.int64))


@dataclass(frozen=True)
class History:
    """A series' history still to load: the planned time behind each parameter's frontier (its newest
    checkpoint, or for a parameter without one the start of its newest span), and all there is behind
    them (from the window's start)."""

    windows: int = 0  # requests, one a window
    ms: int = 0  # parameter-time left, summed over the parameters
    total_ms: int = 0  # parameter-time from the window's start to the frontiers

    @property
    def share_done(self) -> float:
        return 1.0 if not self.total_ms else max(0.0, 1 - self.ms / self.total_ms)


class Plan:
    """A run's work, fresh data first: the spans that hold new data by their ends, newest first, so that
    every parameter's newest span is fetched before any history; then history, filled backward from the
    newest by the starts of its spans. A stop anywhere leaves both kinds of work open in the checkpoints (covered time is a set of
    intervals), and the next run takes them up in the same order."""

    def __init__(
        self,
        fleet: Fleet,
        coverage: Coverage,
        options: PlanOptions,
        series: list[Series],
        spans: dict[Series, Spans],
        by_object: bool = False,
        extra: dict[Series, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
        arrivals: Arrivals | None = None,
        full_refresh: bool = False,
        waiting: np.ndarray | None = None,
        every: dict[Series, int] | None = None,
        averages: dict[int, WindowData] | None = None,
        work: dict[Series, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
    ) -> None:
        """`extra`: (param_id, start, end) to read besides what the checkpoints miss (late data);
        `arrivals`: what arrived so far, which tells the raw points that arrive late (none when the run
        reads everything again); `waiting`: parameters whose new time waits (quiet ones, etl/pipeline/
        late.py); `every`: a series' new time is asked once it is this old (`cadence.series`); `averages`:
        the probes' averages up to the run's end, which average windows within them take as their answer;
        `work`: (param_id, start, end) to read and replace instead of what the checkpoints miss (`etl
        verify --repair`)."""
        self.fleet = fleet
        self.options = options
        self._known: tuple[np.ndarray, tuple[np.ndarray, ...], Rows] | None = None
        if arrivals is not None and Series.RAW in series:
            covered = _EMPTY_WORK if full_refresh else _rows_of(coverage, Series.RAW, fleet.ids)
            self._known = (arrivals.newest_of(Series.RAW, fleet.ids), covered, arrivals.late)
        self.spans = spans
        self.by_object = by_object
        self.series = [Series(s) for s in SERIES if s in series]
        self.needed = {
            s: needed(coverage, s, fleet.ids, options) if work is None else _EMPTY_WORK for s in self.series
        }
        self.frontier = {s: self._frontier(coverage, s, full_refresh) for s in self.series}
        self.history = {s: self._history(s, *self.needed[s]) for s in self.series}
        for s in self.series:
            wait = np.zeros(len(fleet), bool) if waiting is None else np.isin(fleet.ids, waiting)
            if (limit := (every or {}).get(s)) and not full_refresh:
                wait |= not_due(coverage, s, fleet.ids, options.end, limit)
            if wait.any():
                self.needed[s] = self._without_new_time(s, wait, *self.needed[s])
        self.averages = averages or {}
        for s, (pids, starts, ends) in [*(extra or {}).items(), *(work or {}).items()]:
            if s in self.needed and len(pids):
                mine = np.isin(pids, fleet.ids)
                have = self.needed[s]
                self.needed[s] = union(
                    np.r_[have[0], pids[mine]], np.r_[have[1], starts[mine]], np.r_[have[2], ends[mine]]
                )
        self._summary = {series.value: self._summarize(series, *work) for series, work in self.needed.items()}

    def _rows(self, pids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.fleet.ids, pids)

    def _without_new_time(
        self, series: Series, wait: np.ndarray, pids: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The work less the new time (past the frontier) of the parameters that wait (fleet mask)."""
        rows = self._rows(pids)
        ends = np.where(wait[rows], np.minimum(ends, self.frontier[series][rows]), ends)
        keep = starts < ends
        return pids[keep], starts[keep], ends[keep]

    def _frontier(self, coverage: Coverage, series: Series, full_refresh: bool) -> np.ndarray:
        """Each parameter's frontier (fleet order): where fresh data starts and history ends behind it."""
        span = self.spans[series].span
        newest_span = max(self.options.start, (self.options.end - 1) // span * span)
        if full_refresh:
            return np.full(len(self.fleet), newest_span, np.int64)
        high = coverage.high_waters(series, self.fleet.ids)
        return np.where(high == NONE, newest_span, np.minimum(high, self.options.end))

    def _history(self, series: Series, pids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> History:
        frontier = self.frontier[series]
        behind = np.minimum(ends, frontier[self._rows(pids)])
        keep = starts < behind
        s, e = starts[keep], behind[keep]
        total = int(np.maximum(frontier - self.options.start, 0).sum())
        return History(self._count(series, s, e, None), int((e - s).sum()), total)

    def _summarize(
        self, series: Series, pids: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> dict[str, int]:
        spans = self.spans[series]
        first, last = starts // spans.span, (ends - 1) // spans.span
        merged = self._merged(series, starts, ends)
        if merged is not None:  # its last two spans count as one
            second = merged // spans.span + 1
            first, last = first - (first >= second), last - (last >= second)
        buckets = self.fleet.buckets[self._rows(pids)]
        _, slab_s, slab_e = union(buckets, first, last + 1)
        return {
            "parameters": len(np.unique(pids)),
            "slabs": int((slab_e - slab_s).sum()),
            "windows": self._count(series, starts, ends, merged),
        }

    def _count(self, series: Series, starts: np.ndarray, ends: np.ndarray, merged: int | None) -> int:
        """The windows (requests) the intervals make, as `_slabs_at` cuts them, without making them: each
        span's piece is one request if it fits the unit, else cut at multiples of it. Only an interval's
        first and last pieces can be shorter than a span."""
        span, unit = self.spans[series].span, self.spans[series].unit

        def aligned(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.where(b > a, (b - 1) // unit - a // unit + 1, 0)

        def fitted(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # a piece within one span
            return np.where(b - a <= unit, (b > a).astype(np.int64), aligned(a, b))

        total = 0
        if merged is not None:  # the last two spans: one
            a, b = np.maximum(starts, merged), ends
            total += int(fitted(a, b).sum())
            ends = np.minimum(ends, merged)
        head_end = np.minimum(ends, (starts // span + 1) * span)
        tail_start = np.maximum(starts, (ends - 1) // span * span)
        one = head_end >= ends
        count = aligned(starts, ends)  # every piece cut at the unit's multiples...
        # ...less what the first and last pieces save by fitting one request
        count -= aligned(starts, head_end) - fitted(starts, head_end)
        count -= np.where(one, 0, aligned(tail_start, ends) - fitted(tail_start, ends))
        return total + int(count.sum())

    def summary(self) -> dict[str, dict[str, int]]:
        """Per series: parameters, slabs and windows (one request each unless an answer is cut)."""
        return {series: dict(figures) for series, figures in self._summary.items()}

    @property
    def windows(self) -> int:
        return sum(s["windows"] for s in self._summary.values())

    def slabs(self) -> Iterator[Slab]:
        """Every slab, newest span first (then series, then bucket): each parameter's newest data before
        its history, and history newest first (`_slabs_of`). The work is handed out once: each series' arrays are let
        go with its last slab."""
        needed, self.needed = self.needed, {}
        streams = [
            self._slabs_of(series, order, *needed.pop(series))
            for order, series in enumerate(self.series)
            if series in needed
        ]
        for _, _, _, slab in heapq.merge(*streams, key=lambda item: item[:3]):
            yield slab

    def _merged(self, series: Series, starts: np.ndarray, ends: np.ndarray) -> int | None:
        """The start of the last two spans when they are one (else None): when an interval that fits one
        request crosses the last span boundary of the work (the tail since the last run, at midnight for
        raw, at a week's end for aggregates), so that it is asked once; the writer splits its rows by day."""
        if not len(starts):
            return None
        spans = self.spans[series]
        boundary = (int(ends.max()) - 1) // spans.span * spans.span
        crossing = (starts < boundary) & (ends > boundary) & (ends - starts <= spans.unit)
        return boundary - spans.span if crossing.any() else None

    def _spans(self, series: Series, starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
        """The spans with any work, newest first."""
        span = self.spans[series].span
        _, first, stop = union(np.zeros(len(starts), np.int64), starts // span, (ends - 1) // span + 1)
        out = [
            (i * span, (i + 1) * span)
            for lo, hi in reversed(list(zip(first.tolist(), stop.tolist(), strict=True)))
            for i in range(hi - 1, lo - 1, -1)
        ]
        merged = self._merged(series, starts, ends)
        if merged is not None:
            out[:2] = [(merged, out[0][1])]
        return out

    def _slabs_of(
        self,
        series: Series,
        order: int,
        pids: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
    ) -> Iterator[tuple[tuple[int, int], int, int, Slab]]:
        if not len(pids):
            return
        frontier = self.frontier[series]
        for span_start, span_end in self._spans(series, starts, ends):
            # Fresh spans by their end, then history by its start, both newest first: a backfill's long
            # spans (a week of averages, few small answers) come after the raw days inside them, so that
            # it ends on them and not on a day of raw files written after the last answer.
            hit = (starts < span_end) & (ends > span_start)
            fresh = bool((np.minimum(ends[hit], span_end) > frontier[self._rows(pids[hit])]).any())
            when = (0, -span_end) if fresh else (1, -span_start)
            for slab in self._slabs_at(series, (pids, starts, ends), span_start, span_end):
                yield when, order, slab.bucket, slab

    def _slabs_at(
        self, series: Series, work: tuple[np.ndarray, ...], span_start: int, span_end: int
    ) -> Iterator[Slab]:
        pids, starts, ends = work
        hit = np.flatnonzero((starts < span_end) & (ends > span_start))
        buckets = self.fleet.buckets[self._rows(pids[hit])]
        by_bucket = np.argsort(buckets, kind="stable")
        hit, buckets = hit[by_bucket], buckets[by_bucket]  # all this generator keeps between slabs
        if not len(hit):
            return
        at = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
        unit = self.spans[series].unit
        for lo, hi in zip(at.tolist(), [*at[1:].tolist(), len(buckets)], strict=True):
            mine = hit[lo:hi]
            p = pids[mine]
            s, e = np.maximum(starts[mine], span_start), np.minimum(ends[mine], span_end)
            rows = self._rows(p)
            order = np.lexsort((s, p, self.fleet.objects[rows] if self.by_object else p))
            p, s, e, rows = p[order], s[order], e[order], rows[order]
            if unit != span_end - span_start:  # raw: each interval as requests of at most the unit
                piece, s, e = requests_of(s, e, unit)
                p, rows = p[piece], rows[piece]
            windows = Windows(series, p, self.fleet.objects[rows], self.fleet.kinds[rows], s, e)
            known = self._known_of(rows, span_start, span_end) if series is Series.RAW else None
            history = e <= self.frontier[series][rows]
            averages = (
                {pid: self.averages[pid] for pid in np.unique(p).tolist() if pid in self.averages}
                if series is Series.AVERAGE and self.averages
                else None
            )
            yield Slab(series, span_start, span_end, int(buckets[lo]), windows, known, history, averages)

    def _known_of(self, rows: np.ndarray, start: int, end: int) -> Known | None:
        """What the run knew of a raw slab's parameters before it (rows: their positions in the fleet)."""
        if self._known is None:
            return None
        newest, (cp, cs, ce), late = self._known
        rows = np.unique(rows)
        ids = self.fleet.ids[rows]
        lo, hi = np.searchsorted(cp, ids, side="left"), np.searchsorted(cp, ids, side="right")
        count = hi - lo
        take = np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        take = take[(cs[take] < end) & (ce[take] > start)]
        covered = (cp[take], cs[take], ce[take])  # whole: a late point's delay runs to its interval's end
        prior = late.take((late.at >= start) & (late.at < end) & np.isin(late.param_id, ids))
        return Known(ids, newest[rows], covered, prior)


_NONE = np.empty(0, np.int64)
_EMPTY_WORK = (_NONE, _NONE, _NONE)


def _rows_of(
    coverage: Coverage, series: Series, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The covered intervals of these parameters in one series: (param_id, start, end), sorted."""
    cp, cs, ce = coverage.of_series(series)
    mine = np.isin(cp, ids)
    return cp[mine], cs[mine], ce[mine]


def spans_for(raw_window: int, aggregate_window: int) -> dict[Series, Spans]:
    return {
        Series.RAW: Spans(DAY_MS, raw_window),
        Series.AVERAGE: Spans(aggregate_window, aggregate_window),
        Series.CANDLES: Spans(aggregate_window, aggregate_window),
    }
