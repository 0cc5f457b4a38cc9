"""Checkpoints of a wide fleet: a year of them for 100,000 parameters x 3 series load and plan the next
day, held in as many intervals as there are gaps, however long the history; and committing a slab writes
bytes in proportion to the slab, not to the state. The time it takes: benchmarks/state.py."""

from __future__ import annotations

import numpy as np

from etl.model import ParamKind, Series, Window, Windows
from etl.state import Coverage, StateStore
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS
from tests.support.wide_state import DAYS, PARAMS, T0, fleet, load_and_plan, write_state


def test_a_year_of_checkpoints_for_100000_parameters_loads_and_plans_the_next_day(tmp_path):
    write_state(tmp_path)
    planned = load_and_plan(tmp_path, fleet())
    assert len(planned.loaded) == 3 * PARAMS
    # One interval per key for the year, two where a day failed: the day of slabs in the log merged in.
    assert len(planned.loaded.key) == 3 * PARAMS + 3 * (PARAMS // 100)
    # the new day for every key and the overlap hour behind it (the day before), and the failed day of 1%
    assert planned.summary["raw"]["windows"] == 2 * PARAMS + PARAMS // 100
    assert planned.windows == sum(s["windows"] for s in planned.summary.values())


def test_committing_a_slab_writes_bytes_in_proportion_to_the_slab(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    for folder, width in ((small, 10), (large, PARAMS)):
        store = StateStore(Storage(str(folder)))
        store.load()
        ids = np.arange(1, width + 1)
        keys = (ids[:, None] * 4 + np.arange(3)).ravel()
        store.replace(Coverage.of(keys, np.full(len(keys), T0), np.full(len(keys), T0 + DAYS * DAY_MS)))
        store.commit(
            Windows.of(
                Series.RAW,
                [
                    Window(p, 1, ParamKind.PHYSICAL, Series.RAW, T0 + DAYS * DAY_MS, T0 + (DAYS + 1) * DAY_MS)
                    for p in range(1, 501)
                ],
            )
        )
    sizes = [next((folder / "log").iterdir()).stat().st_size for folder in (small, large)]
    assert sizes[0] == sizes[1] < 4_000  # 500 windows: the same bytes whatever the state holds
