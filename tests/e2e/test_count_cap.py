"""A server that silently caps its series answers loses no point, over a real socket: whole runs under
caps of several sizes, alone and with every other fault, window by window on every route, and what it
costs when there is no cap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from etl.client import MonitoringClient
from etl.model import ParamKind, Series, Window
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import fetch_window
from etl.timeutil import DAY_MS, HOUR_MS, to_ms
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact
from tests.support.client import FAST
from tests.support.configs import make_config
from tests.support.emulator import END, START, T0, emulator_config
from tests.support.pipeline import run

# The shapes below make each cap bind: the default (periods 10 s to 15 min) for the small caps, and
# denser parameters, whose raw days hold 2,880 to 8,640 points, for the large ones.
DENSE = {"period_range": (10, 30)}
LATER_END = "2026-11-05T00:00:00Z"  # 4 days: 192 half-hour buckets per aggregate window, over a cap of 100
CAPS = [(7, {}, END), (100, {}, LATER_END), (1000, DENSE, END), (5000, DENSE, END)]
# Ids in the test shape (2 objects, 3 physical of which the last is a signal, 1 calculated).
PARAMS = {ParamKind.PHYSICAL: 1001, ParamKind.SIGNAL: 1003, ParamKind.CALCULATED: 1501}


@pytest.mark.parametrize("cap, shape, end", CAPS, ids=[f"cap{c[0]}" for c in CAPS])
def test_a_run_under_a_silent_cap_is_exact(tmp_path, cap, shape, end):
    settings = emulator_config(**shape)
    with run_emulator(settings) as emu:
        emu.set_faults(max_count=cap)
        summary = run(make_config(emu.base_url, tmp_path, window={"end": end})).as_dict()
    assert_exact(tmp_path, START, end, settings=settings)
    assert summary["status"] == "ok" and summary["continuations"] > 0


def test_a_silent_cap_with_every_other_fault(fresh_emulator, tmp_path):
    fresh_emulator.set_faults(
        max_count=100,
        error_rate=0.2,
        rate_limit_rate=0.1,
        retry_after=0.05,
        session_max_requests=10,
        session_end="302-login",
        truncate_rate=0.1,
        drop_rate=0.05,
        seed=9,
    )
    config = make_config(
        fresh_emulator.base_url,
        tmp_path,
        window={"end": LATER_END},
        extract={"concurrency": 16},
        retry={"attempts": 25},
    )
    summary = run(config).as_dict()
    assert_exact(tmp_path, START, LATER_END)
    assert summary["status"] == "ok" and summary["relogins"] > 0 and summary["continuations"] > 0
    assert {"http_429", "invalid_body", "connection"} <= summary["retries_by_reason"].keys()


@pytest.fixture(scope="module")
def cap_emulator() -> Iterator[RunningEmulator]:
    with run_emulator(emulator_config()) as running:
        yield running


async def _fetch(emulator: RunningEmulator, windows: list[Window], max_points: int = 10_000):
    counts = Counts()
    async with MonitoringClient(emulator.base_url, "demo", "demo", retry=FAST) as client:
        data = await asyncio.gather(*(fetch_window(client, w, max_points, counts) for w in windows))
        return data, counts, client.caps


@pytest.mark.parametrize("series", list(Series))
@pytest.mark.parametrize("kind", list(ParamKind))
@pytest.mark.parametrize("cap", [7, 50])
def test_a_window_comes_whole_and_once_on_every_route(cap_emulator, cap, kind, series):
    """fetch_window under a cap gives exactly what it gives without one: no point lost, the point at each
    continuation's start not twice; the cap is learned once an answer proves cut."""
    days = 1 if series is Series.RAW else 2
    window = Window(PARAMS[kind], 1, kind, series, T0, T0 + days * DAY_MS)
    cap_emulator.set_faults(reset=True)
    (whole,), plain, _ = asyncio.run(_fetch(cap_emulator, [window]))
    cap_emulator.set_faults(max_count=cap)
    (capped,), counts, caps = asyncio.run(_fetch(cap_emulator, [window]))
    cap_emulator.set_faults(reset=True)
    assert len(whole) > cap and plain.requests <= 2
    for column in whole.__dataclass_fields__:
        assert np.array_equal(getattr(capped, column), getattr(whole, column)), column
    assert (np.diff(capped.ts) > 0).all()
    assert caps.cap(kind, series) == cap and counts.continuations > 0
    assert counts.requests >= len(whole) / cap


@pytest.mark.parametrize("series", [Series.AVERAGE, Series.CANDLES])
def test_equal_windows_ending_at_the_clock_cost_one_request_more(cap_emulator, series):
    """Windows of every parameter over the last two hours, to past the server's clock: all answers are about
    as long, none ends at the window's end. One wider request rules a cap out for all of them."""
    now = T0 + 5 * DAY_MS + 10 * HOUR_MS + 12_345
    cap_emulator.set_faults(reset=True)
    cap_emulator.set_clock(now)
    try:
        windows = [
            Window(pid, pid // 1000, kind, series, now - 2 * HOUR_MS, now + HOUR_MS)
            for pid, kind in [
                (1001, ParamKind.PHYSICAL),
                (1002, ParamKind.PHYSICAL),
                (1003, ParamKind.SIGNAL),
                (2001, ParamKind.PHYSICAL),
                (2002, ParamKind.PHYSICAL),
                (2003, ParamKind.SIGNAL),
            ]
        ]
        data, counts, _ = asyncio.run(_fetch(cap_emulator, windows))
    finally:
        cap_emulator.set_clock(to_ms("2026-11-20T00:00:00Z"))
    assert all(len(d) >= 3 for d in data)
    assert counts.requests == len(windows) + 1 and counts.continuations == 1


@pytest.mark.parametrize("reject_over", [5000, 300])
def test_a_server_that_refuses_large_counts_loses_nothing(tmp_path, reject_over):
    """Counts above the server's maximum answer 400: the count is halved until accepted, then kept."""
    settings = emulator_config(**DENSE)
    with run_emulator(settings) as emu:
        emu.set_faults(count_reject_over=reject_over)
        summary = run(make_config(emu.base_url, tmp_path)).as_dict()
        refused = [r for r in emu.requests() if r["status"] == 400]
    assert_exact(tmp_path, START, END, settings=settings)
    assert summary["status"] == "ok" and refused
    # learned once per route, not once per window: a handful of refusals per route at most
    assert len(refused) <= 6 * 4 * 16  # routes x halvings x requests in flight when the first came back


@pytest.mark.parametrize("style", ["html", "text", "empty"])
def test_error_bodies_in_any_style_are_retried_and_the_output_is_exact(tmp_path, style):
    settings = emulator_config()
    with run_emulator(settings) as emu:
        emu.set_faults(
            error_body=style,
            error_rate=0.2,
            rate_limit_rate=0.1,
            retry_after=0.05,
            session_max_requests=15,
            seed=3,
        )
        summary = run(make_config(emu.base_url, tmp_path, retry={"attempts": 25})).as_dict()
    assert_exact(tmp_path, START, END, settings=settings)
    assert summary["status"] == "ok" and summary["relogins"] > 0
    assert {"http_429"} <= summary["retries_by_reason"].keys()
