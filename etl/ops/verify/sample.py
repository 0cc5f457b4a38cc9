"""Which stored windows `etl verify` reads again: what the checkpoints claim, settled, cut as a run cuts
it, and a sample of that drawn with a seed.

The candidates of a series are, per parameter of the fleet, its checkpointed intervals within the
verify's [start, end), less what the next run reads again anyway (the late tails from the parameter's
newest point, and for calculated parameters the last `window.revisions`: etl/pipeline/late.py), cut into
the windows a run asks for (its spans and request units: etl/pipeline/plan.py). They are kept as
intervals, a few per (parameter, series): sized by the fleet, never by the history.

The sample is n = ceil(fraction x candidates) windows (`all`, a fraction of 1: every one). Each (parameter, series) is a
stratum whose newest window is taken first: with n at least the strata, each stratum's newest window is
in and the rest is drawn at random among the other windows; with fewer, n strata are drawn at random.
Windows come a span at a time (a UTC day of raw windows, an `extract.aggregate_window` of the others),
the newest span first, so a budget that runs out leaves out the oldest. The draw is made as the spans
go: the count a span gets is hypergeometric, then which of its windows uniform, so the sample is exactly
uniform over the candidates, holds one span of the fleet at a time, and the seed draws it again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from etl.config import Config
from etl.model import PARAM_KINDS, SERIES, ParamKind, Params, Series, Windows, cut_columns, union
from etl.pipeline.late import LateOptions, tails
from etl.pipeline.plan import Spans, spans_for
from etl.state import Coverage
from etl.state.arrivals import Arrivals

_CALCULATED = PARAM_KINDS.index(ParamKind.CALCULATED)


@dataclass(frozen=True)
class Candidates:
    """One series' settled, checkpointed intervals of the fleet's parameters, sorted by (param_id, start)."""

    series: Series
    spans: Spans
    param_id: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def counts(self) -> np.ndarray:
        """The windows of each interval (cut at the request unit)."""
        unit = self.spans.unit
        counts: np.ndarray = (self.end - 1) // unit - self.start // unit + 1
        return counts

    def newest(self) -> tuple[np.ndarray, np.ndarray]:
        """Each parameter's newest window: (param_id, its start), by param_id."""
        last = (
            np.r_[self.param_id[1:] != self.param_id[:-1], True] if len(self.param_id) else np.empty(0, bool)
        )
        unit = self.spans.unit
        ends = self.end[last]
        return self.param_id[last], np.maximum(self.start[last], (ends - 1) // unit * unit)


@dataclass(frozen=True)
class Scope:
    """What the candidates were taken from, and what was left out of them."""

    start: int
    end: int
    unsettled: int  # (parameter, series) whose newest stretch the next run reads again: not verified
    unlisted: int  # parameters with checkpoints that the platform no longer lists (or the config selects)


def candidates(
    config: Config, coverage: Coverage, arrivals: Arrivals, fleet: Params, start: int, end: int, now: int
) -> tuple[list[Candidates], Scope]:
    """Every series' candidates over [start, end) (`now`: the server's clock less the horizon's margin)."""
    window = config.window
    spans = spans_for(config.extract.raw_window, config.extract.aggregate_window)
    options = LateOptions(
        start, end, now, window.late_max, window.revisions, tuple(config.series), config.extract.max_points
    )
    calculated = fleet.id[fleet.kind == _CALCULATED]
    found, unsettled, unlisted = [], 0, set()
    for series in (s for s in SERIES if s in config.series):
        pids, starts, ends = coverage.of_series(series)
        unlisted.update(np.unique(pids[~np.isin(pids, fleet.id)]).tolist())
        listed = np.isin(pids, fleet.id)
        pids, starts, ends = pids[listed], np.maximum(starts[listed], start), np.minimum(ends[listed], end)
        # Cut where the next run reads again: its late tails, a calculated parameter's revisions.
        cut = np.full(len(fleet.id), np.iinfo(np.int64).max, np.int64)
        for tail in tails(coverage, arrivals, series, fleet.id, options):
            at = np.searchsorted(fleet.id, tail[0])
            np.minimum.at(cut, at, tail[1])
        if window.revisions:
            np.minimum.at(cut, np.searchsorted(fleet.id, calculated), now - window.revisions)
        limit = cut[np.searchsorted(fleet.id, pids)] if len(fleet.id) else cut[:0]
        unsettled += len(np.unique(pids[ends > limit]))
        pids, starts, ends = union(pids, starts, np.minimum(ends, limit))
        found.append(Candidates(series, spans[series], pids, starts, ends))
    return found, Scope(start, end, unsettled, len(unlisted))


class Sample:
    """The windows to verify, drawn from the candidates with `seed` (`fraction` 1: all of them)."""

    def __init__(self, found: list[Candidates], fleet: Params, fraction: float, seed: int) -> None:
        self.found, self.fleet, self.seed = found, fleet, seed
        self.rng = np.random.default_rng(seed)
        counts = [c.counts() for c in found]
        self.candidates = int(sum(int(c.sum()) for c in counts))
        newest = [c.newest() for c in found]
        strata = sum(len(n[0]) for n in newest)
        size = self.size = min(self.candidates, math.ceil(round(fraction * self.candidates, 6)))
        # Each stratum's newest window is in (all of them when the sample holds as many), the rest drawn.
        taken = np.ones(strata, bool)
        if size < strata:
            taken[:] = False
            taken[self.rng.choice(strata, size, replace=False)] = True
        bounds = np.cumsum([0, *(len(n[0]) for n in newest)])
        self.heads = [
            (ids[taken[lo:hi]], starts[taken[lo:hi]], ids, starts)
            for (ids, starts), lo, hi in zip(newest, bounds[:-1], bounds[1:], strict=True)
        ]
        self.rest = self.candidates - strata  # windows left to draw from
        self.drawn = max(0, size - strata)  # windows left to draw

    def spans(self) -> Iterator[Windows]:
        """The sample, a series' span at a time, the newest span first (then series in their order)."""
        streams = [self._spans_of(order, c) for order, c in enumerate(self.found)]
        for _, _, windows in heapq.merge(*streams, key=lambda item: item[:2]):
            yield windows

    def _spans_of(self, order: int, found: Candidates) -> Iterator[tuple[int, int, Windows]]:
        span = found.spans.span
        if not len(found.param_id):
            return
        _, first, stop = union(
            np.zeros(len(found.param_id), np.int64), found.start // span, (found.end - 1) // span + 1
        )
        for lo, hi in zip(first[::-1].tolist(), stop[::-1].tolist(), strict=True):
            for index in range(hi - 1, lo - 1, -1):
                windows = self._draw(order, found, index * span, (index + 1) * span)
                if len(windows):
                    yield -(index + 1) * span, order, windows

    def _draw(self, order: int, found: Candidates, span_start: int, span_end: int) -> Windows:
        hit = np.flatnonzero((found.start < span_end) & (found.end > span_start))
        pids = found.param_id[hit]
        piece, starts, ends = cut_columns(
            np.maximum(found.start[hit], span_start), np.minimum(found.end[hit], span_end), found.spans.unit
        )
        pids = pids[piece]
        taken_ids, taken_starts, head_ids, head_starts = self.heads[order]
        at = np.minimum(np.searchsorted(head_ids, pids), max(len(head_ids) - 1, 0))
        head = (
            (head_ids[at] == pids) & (head_starts[at] == starts)
            if len(head_ids)
            else np.zeros(len(pids), bool)
        )
        at = np.minimum(np.searchsorted(taken_ids, pids), max(len(taken_ids) - 1, 0))
        keep = (
            head & (taken_ids[at] == pids) & (taken_starts[at] == starts) if len(taken_ids) else head & False
        )
        others = np.flatnonzero(~head)
        if self.drawn and len(others):
            count = (
                self.drawn
                if self.rest == len(others)
                else int(self.rng.hypergeometric(len(others), self.rest - len(others), self.drawn))
            )
            keep[others[self.rng.choice(len(others), count, replace=False)]] = True
            self.drawn -= count
        self.rest -= len(others)
        pids, starts, ends = pids[keep], starts[keep], ends[keep]
        rows = np.searchsorted(self.fleet.id, pids)
        return Windows(found.series, pids, self.fleet.object_id[rows], self.fleet.kind[rows], starts, ends)
