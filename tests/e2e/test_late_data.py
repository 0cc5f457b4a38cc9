"""Points that reach the platform late land exactly once (issue 39): a parameter hours late, a
controller offline whose backlog comes at once, calculated values revised after they were read."""

from __future__ import annotations

import logging
import random
import time

import pytest

from etl.config import parse_config
from etl.ops.doctor import diagnose
from etl.timeutil import DAY_MS, HOUR_MS
from etl_emulator.lateness import Lateness
from etl_emulator.server import run_emulator
from tests.support.cli import etl_process
from tests.support.configs import write_config
from tests.support.output import read_quality
from tests.support.pipeline import run
from tests.support.postgres import sink
from tests.support.schedule import (
    FIRST_RUN,
    T0,
    Schedule,
    assert_exact,
    config_data,
    config_for,
    late_emulator,
    run_schedule,
)

HOURS = 48  # past the offline controller's upload (20:00 on the second day) and a day more
FORMATS = ["parquet", "delta", "iceberg"]


# Lake tables commit slower: a day of their hourly runs reaches past the controller's upload too (the
# whole schedule: `make soak`).
@pytest.mark.parametrize(
    ("fmt", "hours"),
    [
        ("parquet", HOURS),
        ("delta", 24),
        ("iceberg", 24),
        ("postgres", 24),
        pytest.param("delta", HOURS, marks=pytest.mark.slow),
        pytest.param("iceberg", HOURS, marks=pytest.mark.slow),
    ],
)
def test_a_schedule_against_a_late_platform_ends_exact(tmp_path, fmt, hours, request):
    config = late_emulator()
    # PostgreSQL: the session's cluster, a schema of this test's
    keys = sink(request.getfixturevalue("postgres"), tmp_path) if fmt == "postgres" else {}
    with run_emulator(config) as emulator:
        schedule = run_schedule(emulator, config_for(emulator, tmp_path, fmt, sink=keys), hours)
    assert all(s.status == "ok" for s in schedule.summaries), [s.error for s in schedule.summaries]
    final = type(config)(**{**config.__dict__, "now_ms": schedule.last_end + 60_000})
    assert_exact(tmp_path, final, schedule.last_end, fmt)
    late = [s.late for s in schedule.summaries]
    assert sum(f.points for f in late) > 0
    assert max(f.longest_ms for f in late) >= 10 * HOUR_MS  # the offline controller's backlog
    assert sum(f.revised for f in late) > 0
    quality = read_quality(tmp_path).to_pydict()
    by_param = {}
    for pid, points in zip(quality["param_id"], quality["late_points"], strict=True):
        by_param[pid] = by_param.get(pid, 0) + (points or 0)
    assert by_param[1001] > 0 and by_param[2001] > 0 and by_param[1002] == 0


def killed_schedule(emulator, tmp_path, fmt: str, hours: int, seed: int) -> Schedule:
    """The schedule, each hourly run first SIGKILLed at a random moment (a subprocess), then run again."""
    data = config_data(emulator, tmp_path / "out", fmt, extract={"concurrency": 2})
    path = write_config(tmp_path / "c.yaml", data)
    rnd = random.Random(seed)

    killed: list[int] = []

    def kill_one(_: int) -> None:
        proc = etl_process("run", "-c", str(path), "--no-progress")
        time.sleep(rnd.uniform(0.3, 1.5))
        proc.kill()
        proc.communicate()
        killed.append(proc.returncode == -9)

    # From 17:07 on the second day: past the offline controller's upload at 20:00.
    schedule = run_schedule(emulator, parse_config(data), hours, kill_one, FIRST_RUN + 17 * HOUR_MS)
    assert sum(killed) * 2 >= len(killed), killed  # most runs were killed, not let finish
    return schedule


@pytest.mark.parametrize("fmt", FORMATS)
def test_killed_at_random_moments_a_late_schedule_still_ends_exact(tmp_path, fmt):
    config = late_emulator()
    with run_emulator(config) as emulator:
        emulator.set_faults(latency=0.02)
        schedule = killed_schedule(emulator, tmp_path, fmt, 6, seed=3)
    final = type(config)(**{**config.__dict__, "now_ms": schedule.last_end + 60_000})
    assert_exact(tmp_path / "out", final, schedule.last_end, fmt)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_killed_at_random_moments_the_whole_late_schedule_still_ends_exact(tmp_path, fmt):
    config = late_emulator()
    with run_emulator(config) as emulator:
        emulator.set_faults(latency=0.02)
        schedule = killed_schedule(emulator, tmp_path, fmt, HOURS, seed=11)
    final = type(config)(**{**config.__dict__, "now_ms": schedule.last_end + 60_000})
    assert_exact(tmp_path / "out", final, schedule.last_end, fmt)


def test_a_controller_offline_for_days_costs_a_probe_a_run_and_its_whole_backlog_lands(tmp_path, caplog):
    """Controller 21 (2001, 2003, 2501) offline for three days, window.late_max two: while it is quiet
    its parameters cost one small probe each at their cadence (cadence.quiet_max), nothing in between;
    when it is back, its backlog older than late_max is looked for once, fetched, and said."""
    day = T0 + DAY_MS  # the second day: offline from 06:00 to 06:00 on the fifth
    config = late_emulator(Lateness(offline=[(21, day + 6 * HOUR_MS, day + 3 * DAY_MS + 6 * HOUR_MS)]))
    clocks = [
        day + 7 * 60_000,
        day + 12 * HOUR_MS,
        day + 2 * DAY_MS + HOUR_MS,
        day + 2 * DAY_MS + 2 * HOUR_MS,
    ]
    clocks.append(day + 3 * DAY_MS + 7 * HOUR_MS)  # back, its backlog uploaded
    summaries = []
    with run_emulator(config) as emulator:
        settings = config_for(
            emulator, tmp_path, window={"late_max": "2d", "revisions": "off"}, cadence={"quiet_after": "2h"}
        )
        for clock in clocks:
            emulator.set_clock(clock)
            emulator.clear_requests()
            with caplog.at_level(logging.WARNING, logger="etl"):
                summaries.append(run(settings))
            asked = [r for r in emulator.requests() if r.get("param_id") in (2001, 2003, 2501)]
            if clock == clocks[2]:  # quiet since the second day, and due: one probe each, nothing more
                assert summaries[-1].late.quiet == 3 and summaries[-1].late.probes == 3, summaries[-1].late
                assert len(asked) == 3 and all("/average/" in r["path"] for r in asked), asked
            if clock == clocks[3]:  # an hour later: not due again before cadence.quiet_max, nothing asked
                assert summaries[-1].late.probes == 0 and not asked, asked
    last = summaries[-1].late
    assert last.backlog == 3 and last.past_late_max == 3, last
    assert "came back after more than window.late_max" in caplog.text
    final = type(config)(**{**config.__dict__, "now_ms": clocks[-1]})
    assert summaries[-1].window is not None
    assert_exact(tmp_path, final, summaries[-1].window[1])
    # at least from its stamp to the end of the run before, which read past it without it
    assert max(s.late.longest_ms for s in summaries) >= 40 * HOUR_MS
    quality = read_quality(tmp_path).to_pylist()
    backlog = [r for r in quality if r["param_id"] == 2001 and r["day"].day == 11]
    assert backlog and backlog[0]["late_points"] > 0 and backlog[0]["late_seconds"] >= 40 * 3600
    doctor = diagnose(settings, "c.yaml", server=False, now=clocks[-1])
    [finding] = [f for f in doctor.findings if f.check == "runs.late"]
    assert finding.status == "warn" and "came back after more than window.late_max" in finding.message
