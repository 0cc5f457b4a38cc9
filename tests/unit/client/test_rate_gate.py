"""The 429 gate: what a window's deadline does not count, and when it tells the run its end is past."""

from __future__ import annotations

import asyncio
import time

import pytest

from etl.client.retry import ClientStats, RateGate, within


def test_a_pause_reaching_past_the_run_end_tells_the_run_at_once():
    gate, told = RateGate(ClientStats()), []
    gate.ends_at(time.monotonic() + 60, lambda: told.append(True))
    gate.pause(30)
    assert not told
    gate.pause(90)
    assert told == [True]


def test_a_deadline_does_not_count_the_time_the_gate_held_every_request():
    async def work(gate: RateGate, hold: float) -> None:
        async with within(0.5, gate):
            gate.pause(hold)  # another request's 429
            await asyncio.sleep(1.0)

    asyncio.run(work(RateGate(ClientStats()), 2.0))  # 1 s of work, 0.5 s of its own: the rest held
    with pytest.raises(TimeoutError):
        asyncio.run(work(RateGate(ClientStats()), 0.0))


def test_no_deadline_is_no_timeout():
    async def work() -> None:
        async with within(None, RateGate(ClientStats())):
            await asyncio.sleep(0)

    asyncio.run(work())
