"""A wide fleet's checkpoints as a run leaves them: a year of them for 100,000 parameters x 3 series, one
day failed in 1% of the parameters, and the log of a day of slabs on top; then the next day planned over
them (tests/unit/state/test_state_scale.py checks what comes out, benchmarks/state.py times it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etl.model import Param, ParamKind, Params, Series, Window, Windows
from etl.pipeline.plan import Fleet, Plan, PlanOptions, spans_for
from etl.state import Coverage, StateStore
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS, HOUR_MS

T0 = 1_762_000_000_000 - 1_762_000_000_000 % DAY_MS
PARAMS = 100_000
DAYS = 365


def year_of_checkpoints(params: int = PARAMS, days: int = DAYS) -> Coverage:
    """Every (parameter, series) covered for `days`, but for one failed day in 1% of the parameters."""
    ids = np.arange(1, params + 1, dtype=np.int64)
    keys = (ids[:, None] * 4 + np.arange(3)).ravel()
    holed = (keys // 4) % 100 == 0
    hole, end = T0 + 100 * DAY_MS, T0 + days * DAY_MS
    return Coverage.of(
        np.r_[keys, keys[holed]],
        np.r_[np.full(len(keys), T0), np.full(holed.sum(), hole + DAY_MS)],
        np.r_[np.where(holed, hole, end), np.full(holed.sum(), end)],
    )


def write_state(folder: Path, params: int = PARAMS, days: int = DAYS) -> None:
    """The state store in `folder`: the checkpoints, and the log a day of slabs leaves before it is
    folded in (eight slabs of an hour of the last day for 2,000 parameters)."""
    store = StateStore(Storage(str(folder)))
    store.load()
    store.replace(year_of_checkpoints(params, days))
    end = T0 + days * DAY_MS
    slab = [Window(p, p // 1000, ParamKind.PHYSICAL, Series.RAW, end - HOUR_MS, end) for p in range(1, 2_001)]
    for _ in range(8):
        store.commit(Windows.of(Series.RAW, slab))


@dataclass
class Planned:
    loaded: Coverage
    summary: dict[str, dict[str, int]]  # the plan's, per series
    windows: int  # in the plan's slabs


def fleet(params: int = PARAMS) -> list[Param]:
    """The parameters the checkpoints are of, a thousand to an object."""
    return [Param(p, p // 1000, ParamKind.PHYSICAL) for p in range(1, params + 1)]


def load_and_plan(folder: Path, params: list[Param], days: int = DAYS) -> Planned:
    """The state in `folder` loaded, and the next day planned over it for `params` (an hour's overlap)."""
    loaded = StateStore(Storage(str(folder))).load()
    plan = Plan(
        Fleet(Params.of(params), 4),
        loaded,
        PlanOptions(T0, T0 + (days + 1) * DAY_MS, overlap=HOUR_MS),
        list(Series),
        spans_for(DAY_MS, 7 * DAY_MS),
    )
    return Planned(loaded, plan.summary(), sum(len(s.windows) for s in plan.slabs()))
