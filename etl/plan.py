"""Which windows to fetch: (parameter, series, [start, end)) units, grouped into time slabs.

A slab is one series over an aligned span of time (a UTC day for raw, `extract.aggregate_window`
for average and candles). The writer rewrites the date partitions of a slab in one go, so slabs of one
series never share a partition and can be written independently.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from etl.client.models import Parameter
from etl.config import Config
from etl.state import Interval, State, merge, subtract
from etl.timeutil import DAY_MS


@dataclass(frozen=True, slots=True)
class WorkUnit:
    param: Parameter
    series: str
    start: int
    end: int  # exclusive


@dataclass
class Slab:
    series: str
    start: int
    end: int
    units: list[WorkUnit] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, str]:
        return (self.start, self.series)


@dataclass(frozen=True)
class PlanOptions:
    start: int
    end: int
    full_refresh: bool = False


def slab_length(series: str, config: Config) -> int:
    return DAY_MS if series == "raw" else config.extract.aggregate_window


def unit_length(series: str, config: Config) -> int:
    return config.extract.raw_window if series == "raw" else config.extract.aggregate_window


def needed_intervals(state: State, param_id: int, series: str, options: PlanOptions, overlap: int) -> list[Interval]:
    window = (options.start, options.end)
    if options.full_refresh:
        return [window]
    covered = state.intervals(param_id, series)
    gaps = subtract(window, covered)
    high_water = state.high_water(param_id, series)
    if gaps and overlap and high_water is not None and options.start < high_water < options.end:
        # Late points land just behind the last high-water mark: read that stretch again.
        gaps.append((max(options.start, high_water - overlap), high_water))
    return merge(gaps)


def _cut(interval: Interval, step: int) -> list[Interval]:
    start, end = interval
    pieces = []
    while start < end:
        boundary = start - start % step + step
        pieces.append((start, min(end, boundary)))
        start = pieces[-1][1]
    return pieces


def plan(config: Config, params: list[Parameter], state: State, options: PlanOptions) -> list[Slab]:
    slabs: dict[tuple[int, str], Slab] = {}
    for series in config.series:
        span, step = slab_length(series, config), unit_length(series, config)
        for param in params:
            for needed in needed_intervals(state, param.id, series, options, config.window.overlap):
                for slab_start, slab_end in _cut(needed, span):
                    base = slab_start - slab_start % span
                    slab = slabs.setdefault((base, series), Slab(series, base, base + span))
                    for start, end in _cut((slab_start, slab_end), step):
                        slab.units.append(WorkUnit(param, series, start, end))
    return sorted(slabs.values(), key=lambda s: (s.start, s.series))


def describe(slabs: list[Slab]) -> dict[str, dict[str, int]]:
    """Per series: slabs, units (one request each unless a full answer forces a split)."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"slabs": 0, "windows": 0, "parameters": 0})
    params: dict[str, set[int]] = defaultdict(set)
    for slab in slabs:
        out[slab.series]["slabs"] += 1
        out[slab.series]["windows"] += len(slab.units)
        params[slab.series].update(u.param.id for u in slab.units)
    for series, ids in params.items():
        out[series]["parameters"] = len(ids)
    return dict(out)
