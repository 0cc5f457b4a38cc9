"""Gaps in a series (etl.dataset.gaps: the breaks `etl plot` draws) against the emulator's generator, without
a server. The analyst commands themselves: tests/e2e/test_analysts.py."""

from __future__ import annotations

from etl.timeutil import DAY_MS, to_ms
from tests.support.emulator import END, START, emulator_config


def test_gaps_are_spacings_well_above_the_period_and_become_breaks():
    import pandas as pd

    from etl.dataset.gaps import with_breaks
    from etl_emulator.dataset import as_dataset
    from etl_emulator.series import gaps as generator_gaps
    from etl_emulator.series import raw_series

    ds = as_dataset(emulator_config())
    for param_id in (1001, 1002, 2001, 2501):
        ts, values = raw_series(ds, param_id, to_ms(START), to_ms(END) - 1)
        frame = pd.DataFrame({"ts": pd.to_datetime(ts, unit="ms", utc=True), "value": values})
        broken, gaps = with_breaks(frame)
        assert len(gaps) == 2 and len(broken) == len(frame) + 2, param_id
        for (start, end), day in zip(gaps, (to_ms(START), to_ms(START) + DAY_MS), strict=True):
            [(lo, hi)] = generator_gaps(ds, param_id, day, day + DAY_MS - 1)
            assert start.value // 10**6 < lo and hi <= end.value // 10**6  # the generator's gap, inside
        assert broken["value"].isna().sum() == 2
        assert not broken["value"].iloc[[0, -1]].isna().any()
