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

from etl.model import SERIES, Params, Series, Windows, bucket_of, cut_columns, union
from etl.quality.rows import Known
from etl.state import Coverage
from etl.state.arrivals import Arrivals, Rows
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


@dataclass(frozen=True)
class Slab:
    series: Series
    start: int
    end: int  # the span, [start, end)
    bucket: int
    windows: Windows  # in write order: (object_id when partitioned by it,) param_id, start
    known: Known | None = None  # raw slabs: what tells the points that arrive late (etl/quality/rows.py)


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


class Plan:
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
        work: dict[Series, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
    ) -> None:
        """`extra`: (param_id, start, end) to read besides what the checkpoints miss (late data);
        `arrivals`: what arrived so far, which tells the raw points that arrive late (none when the run
        reads everything again); `work`: (param_id, start, end) to read and replace instead of what the
        checkpoints miss (`etl verify --repair`)."""
        self.fleet = fleet
        self._known: tuple[np.ndarray, np.ndarray, Rows] | None = None
        if arrivals is not None and Series.RAW in series:
            high_water = coverage.high_waters(Series.RAW, fleet.ids)
            newest = high_water if full_refresh else arrivals.newest_of(Series.RAW, fleet.ids)
            self._known = (newest, high_water, arrivals.late)
        self.spans = spans
        self.by_object = by_object
        self.series = [Series(s) for s in SERIES if s in series]
        nothing = (np.empty(0, np.int64),) * 3
        self.needed = {
            s: needed(coverage, s, fleet.ids, options) if work is None else nothing for s in self.series
        }
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

    def _summarize(
        self, series: Series, pids: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> dict[str, int]:
        spans = self.spans[series]
        first, last = starts // spans.span, (ends - 1) // spans.span
        buckets = self.fleet.buckets[self._rows(pids)]
        slab_b, slab_s, slab_e = union(buckets, first, last + 1)
        return {
            "parameters": len(np.unique(pids)),
            "slabs": int((slab_e - slab_s).sum()),
            "windows": int(((ends - 1) // spans.unit - starts // spans.unit + 1).sum()),
        }

    def summary(self) -> dict[str, dict[str, int]]:
        """Per series: parameters, slabs and windows (one request each unless an answer is cut)."""
        return {series: dict(figures) for series, figures in self._summary.items()}

    @property
    def windows(self) -> int:
        return sum(s["windows"] for s in self._summary.values())

    def slabs(self) -> Iterator[Slab]:
        """Every slab, by the end of its span (then series, then bucket): a week's raw days come before
        its average and candle slabs, so a run ends on their small answers, not on a day of raw files
        written after the last answer. The work is handed out once: each series' arrays are let go with its last slab."""
        needed, self.needed = self.needed, {}
        streams = [
            self._slabs_of(series, order, *needed.pop(series))
            for order, series in enumerate(self.series)
            if series in needed
        ]
        for _, _, _, slab in heapq.merge(*streams, key=lambda item: item[:3]):
            yield slab

    def _slabs_of(
        self, series: Series, order: int, pids: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> Iterator[tuple[int, int, int, Slab]]:
        spans = self.spans[series]
        if not len(pids):
            return
        # The spans with any work: the union of each interval's spans.
        _, first, stop = union(
            np.zeros(len(pids), np.int64), starts // spans.span, (ends - 1) // spans.span + 1
        )
        for lo, hi in zip(first.tolist(), stop.tolist(), strict=True):
            for index in range(lo, hi):
                span_start = index * spans.span
                for slab in self._slabs_at(series, (pids, starts, ends), span_start, span_start + spans.span):
                    yield span_start + spans.span, order, slab.bucket, slab

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
            if unit != span_end - span_start:  # raw under 24 h: each interval cut at the request unit
                piece, s, e = cut_columns(s, e, unit)
                p, rows = p[piece], rows[piece]
            windows = Windows(series, p, self.fleet.objects[rows], self.fleet.kinds[rows], s, e)
            known = self._known_of(rows, span_start) if series is Series.RAW else None
            yield Slab(series, span_start, span_end, int(buckets[lo]), windows, known)

    def _known_of(self, rows: np.ndarray, day: int) -> Known | None:
        """What the run knew of a raw slab's parameters before it (rows: their positions in the fleet)."""
        if self._known is None:
            return None
        newest, high_water, late = self._known
        rows = np.unique(rows)
        ids = self.fleet.ids[rows]
        prior = late.take((late.at == day) & np.isin(late.param_id, ids))
        points, delay = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
        at = np.searchsorted(ids, prior.param_id)  # one row a parameter: the slab is one day
        points[at], delay[at] = prior.values
        return Known(ids, newest[rows], high_water[rows], points, delay)


def spans_for(raw_window: int, aggregate_window: int) -> dict[Series, Spans]:
    return {
        Series.RAW: Spans(DAY_MS, raw_window),
        Series.AVERAGE: Spans(aggregate_window, aggregate_window),
        Series.CANDLES: Spans(aggregate_window, aggregate_window),
    }
