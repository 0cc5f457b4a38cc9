"""Points that reach the platform late land exactly once (issue 39): a parameter hours late, a
controller offline whose backlog comes at once, calculated values revised after they were read."""

from __future__ import annotations

import numpy as np
import pytest

from etl.timeutil import DAY_MS, HOUR_MS
from etl_emulator.server import run_emulator
from tests.support.output import read
from tests.support.schedule import T0, assert_exact, config_for, late_emulator, run_schedule

HOURS = 30  # past the offline controller's upload (20:00 on the second day) and the revisions after it


@pytest.mark.parametrize("fmt", ["parquet"])
def test_a_schedule_against_a_late_platform_ends_exact(tmp_path, fmt):
    config = late_emulator()
    with run_emulator(config) as emulator:
        schedule = run_schedule(emulator, config_for(emulator, tmp_path, fmt), HOURS)
    assert all(s.status == "ok" for s in schedule.summaries), [s.error for s in schedule.summaries]
    final = type(config)(**{**config.__dict__, "now_ms": schedule.last_end + 60_000})
    assert_exact(tmp_path, final, schedule.last_end, fmt)
    late = [s.late for s in schedule.summaries]
    assert sum(f.points for f in late) > 0
    assert max(f.longest_ms for f in late) >= 10 * HOUR_MS  # the offline controller's backlog
    assert sum(f.revised for f in late) > 0
    quality = read(tmp_path, "quality").to_pydict()
    by_param = {}
    for pid, points in zip(quality["param_id"], quality["late_points"], strict=True):
        by_param[pid] = by_param.get(pid, 0) + (points or 0)
    assert by_param[1001] > 0 and by_param[2001] > 0 and by_param[1002] == 0
