"""The plan spends the server's capacity on what users need first (issues 48 and 56): every parameter's
newest data before any history, history newest first, quiet parameters at their own cadence, and an
hourly run near one request per parameter and series with new data."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import numpy as np
import pyarrow.compute as pc

import etl
from etl.config import parse_config
from etl.errors import EtlError
from etl.pipeline.plan import horizon
from etl.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, iso
from etl_emulator.lateness import Lateness
from etl_emulator.server import run_emulator
from tests.support.cli import etl_process
from tests.support.configs import write_config
from tests.support.emulator import series_requests
from tests.support.expected import SERIES, expected_table
from tests.support.output import read
from tests.support.pipeline import run
from tests.support.schedule import T0, assert_exact, config_data, late_emulator

HISTORY_DAYS = 30


def newest_by_param(table) -> dict[int, int]:
    if not table.num_rows:
        return {}
    ids = table.column("param_id").to_numpy()
    ts = pc.cast(table.column("ts"), "int64").to_numpy()
    return {int(p): int(ts[ids == p].max()) for p in np.unique(ids)}


def test_a_first_load_brings_every_parameters_newest_data_first_and_its_history_behind_it(tmp_path):
    """A long history behind a platform that serves one request at a time, and a run deadline far
    shorter than the load: the first run, stopped at its deadline, has every parameter's newest point;
    what it wrote of each parameter is a stretch ending at its newest point (history newest first). The
    next runs, one SIGKILLed at a random moment, the clock moving, finish the history; the output is then
    exactly the platform's."""
    start, clock = T0 - HISTORY_DAYS * DAY_MS, T0 + 7 * MINUTE_MS
    # 30 days of 8 parameters: some 320 requests of 20 ms each, one at a time: 6.4 s of the server's
    # time, which no client speed fits into the first run's 4 s. The newest day's few dozen: half a second.
    emulator_config = replace(late_emulator(Lateness()), now_ms=clock)
    out = tmp_path / "out"
    with run_emulator(emulator_config) as emulator:
        emulator.set_faults(capacity=1, service_time=0.02)
        data = config_data(emulator, out, retry={"run_deadline": 4}, window={"start": iso(start)})
        try:
            first = run(parse_config(data))
        except EtlError as exc:  # RunDeadline, with the run's summary
            first = exc.summary
        assert first is not None and first.stopped == "run_deadline", first
        assert first.backfill.days_left > 0 and first.backfill.as_dict()["series"]["raw"]["share_done"] < 1
        end = horizon(clock)
        want = expected_table(emulator_config, "raw", start, end)
        got = read(out, "raw")
        newest = newest_by_param(got)
        assert newest == newest_by_param(want)  # every parameter's newest point is in
        for pid, _ in newest.items():  # and what is in of each is one stretch up to it
            mine = pc.cast(got.filter(pc.equal(got["param_id"], pid))["ts"], "int64").to_numpy()
            theirs = pc.cast(want.filter(pc.equal(want["param_id"], pid))["ts"], "int64").to_numpy()
            assert np.array_equal(mine, theirs[theirs >= mine.min()]), pid

        # The next run, an hour later, killed at a random moment; then runs without a deadline.
        data["retry"]["run_deadline"] = None
        path = write_config(tmp_path / "c.yaml", data)
        clock += HOUR_MS
        emulator.set_clock(clock)
        proc = etl_process("run", "-c", str(path), "--no-progress")
        time.sleep(random.Random(5).uniform(0.5, 2.0))
        proc.kill()
        proc.communicate()
        clock += HOUR_MS
        emulator.set_clock(clock)
        last = run(parse_config(data))
        assert last.backfill.days_left == 0
    final = replace(emulator_config, now_ms=clock)
    for series in SERIES:
        got = read(out, series).sort_by([("param_id", "ascending"), ("ts", "ascending")])
        want = expected_table(final, series, start, horizon(clock))
        assert got.select(want.column_names).equals(want), series


def test_quiet_parameters_cost_a_fraction_of_the_active_ones_and_land_when_they_come_back(tmp_path):
    """Six of the eight parameters quiet for days (unplugged), one of them back later with points: the
    hourly runs' series requests (probes included) are at most 1.25x one per parameter and series with new
    data; the one that comes back is in the output within cadence.quiet_max of its return, exactly."""
    day = T0 + DAY_MS
    active = {1001, 2001}
    quiet = [(p, T0 - DAY_MS, T0 + 60 * DAY_MS) for p in (1002, 1003, 1501, 2002, 2003, 2501) if p != 2002]
    back_at = day + 5 * HOUR_MS  # 2002: silent from the start, sends again from 05:00 on the second day
    lateness = Lateness(quiet=[*quiet, (2002, T0 - DAY_MS, back_at)])
    emulator_config = replace(late_emulator(lateness), now_ms=day + 7 * MINUTE_MS)
    out = tmp_path / "out"
    with run_emulator(emulator_config) as emulator:
        config = parse_config(config_data(emulator, out))
        run(config)  # the first day: every parameter, quiet or not, is loaded
        requests, floor = 0, 0
        clock = day + 7 * MINUTE_MS
        for _ in range(7):  # to 08:07: past 2002's first poll since it came back
            clock += HOUR_MS
            emulator.set_clock(clock)
            emulator.clear_requests()
            summary = run(config)
            assert summary.status == "ok"
            requests += len(series_requests(emulator))
            floor += summary.request_floor - 2  # a request per parameter and series with new data
        assert floor >= 7 * 3 * len(active)
        assert requests <= 1.25 * floor, (requests, floor)
        # 2002 came back at 05:00 and was polled at 06:07 (quiet for a day: its cadence is 6 h): in, exactly.
    final = replace(emulator_config, now_ms=clock)
    assert_exact(out, final, horizon(clock))


def test_an_hourly_run_across_midnight_asks_once_a_series_and_says_where_its_requests_went(tmp_path):
    """The run at 00:07 asks each parameter's raw series once for the hour across midnight (the writer
    splits it by day); averages given a cadence of 6 h are not asked hourly; the summary and the metrics
    file count the requests by purpose, beside the floor."""
    emulator_config = replace(late_emulator(Lateness()), now_ms=T0 + DAY_MS + 22 * HOUR_MS + 7 * MINUTE_MS)
    out = tmp_path / "out"
    with run_emulator(emulator_config) as emulator:
        config = parse_config(config_data(emulator, out, cadence={"series": {"average": "6h"}}))
        run(config)
        emulator.set_clock(T0 + DAY_MS + 23 * HOUR_MS + 7 * MINUTE_MS)
        run(config)
        clock = T0 + 2 * DAY_MS + 7 * MINUTE_MS
        emulator.set_clock(clock)
        emulator.clear_requests()
        metrics = tmp_path / "etl.prom"
        summary = etl.run(config, metrics_file=str(metrics))
        asked = series_requests(emulator)
    raw = [r for r in asked if "/average/" not in r["path"] and "/candles/" not in r["path"]]
    assert len(raw) == len({r["path"].split("/")[-3] for r in raw}) == summary.parameters  # once each
    purposes = summary.client.purposes
    averages = [r for r in asked if "/average/" in r["path"]]
    assert len(averages) == purposes["probes"]  # the series, asked 2 hours ago, is not due: only probes
    assert purposes["new_data"] + purposes["probes"] == len(asked)
    assert purposes["session"] == 1 and purposes["catalog"] >= 1
    assert summary.request_floor == 2 * summary.parameters + 2  # raw and candles of each had new points
    record = summary.as_dict()
    assert record["requests_by_purpose"]["new_data"] == purposes["new_data"]
    text = metrics.read_text()
    assert (
        'purpose="new_data"' in text
        and "etl_run_requests_by_purpose{" in text
        and "etl_run_request_floor{" in text
    )
    assert "spent on" in summary.text()
    final = replace(emulator_config, now_ms=clock)
    for series in ("raw", "candles"):  # averages: within their cadence
        got = read(out, series).sort_by([("param_id", "ascending"), ("ts", "ascending")])
        want = expected_table(final, series, T0, horizon(clock))
        assert got.select(want.column_names).equals(want), series


def test_hourly_runs_cost_the_floor_across_midnight_and_a_weeks_end(tmp_path):
    """48 parameters caught up, then hourly runs across a midnight that ends a week (the aggregates'
    slabs): every request the server saw, sign-ins and listings included, is at most 1.05x the floor (one
    per parameter and series with new data, the sign-in and the object list); the output is exact."""
    week = 7 * DAY_MS
    boundary = (T0 + DAY_MS) // week * week + week  # a midnight that is also a week's end
    first = boundary - 3 * HOUR_MS + 7 * MINUTE_MS
    emulator_config = replace(
        late_emulator(Lateness()), objects=6, params_per_object=6, calc_per_object=2, now_ms=first
    )
    out = tmp_path / "out"
    with run_emulator(emulator_config) as emulator:
        config = parse_config(config_data(emulator, out, window={"start": iso(first - DAY_MS)}))
        run(config)
        requests = floor = 0
        clock = first
        for _ in range(5):
            clock += HOUR_MS
            emulator.set_clock(clock)
            emulator.clear_requests()
            summary = run(config)
            requests += len(emulator.requests())
            floor += summary.request_floor
            assert summary.client.purposes["history"] == 0, summary.client.purposes
    assert requests <= 1.05 * floor, (requests, floor)
    final = replace(emulator_config, now_ms=clock)
    for series in SERIES:
        got = read(out, series).sort_by([("param_id", "ascending"), ("ts", "ascending")])
        want = expected_table(final, series, first - DAY_MS, horizon(clock))
        assert got.select(want.column_names).equals(want), series
