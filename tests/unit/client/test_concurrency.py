"""The limit on requests in flight (etl/client/concurrency.py), fed synthetic answers: it grows while they
come as fast as the baseline, whatever the link's latency, shrinks when they slow down and on refusals
and timeouts, and stays within its bounds."""

from __future__ import annotations

import pytest

from etl.client.concurrency import (
    AUTO_START,
    REMEASURE,
    CapacityFigures,
    FixedLimit,
    LearnedLimit,
    make_limit,
)


class Clock:
    """Sends what the limit admits, all answered after `rtt` (or the time `server` gives for that many
    in flight), one round trip after another: as in a run's steady state, each sent with the others."""

    def __init__(self, limit: LearnedLimit | FixedLimit) -> None:
        self.limit, self.now = limit, 0.0

    def trips(self, count: int, rtt: float | None = None, server=None) -> list[int]:
        seen = []
        for _ in range(count):
            n = self.limit.current
            took = server(n) if server else rtt
            for _ in range(n):
                self.limit.succeeded(self.now, took, n)
            self.now += took
            seen.append(self.limit.current)
        return seen


def workers(capacity: int, service: float, latency: float = 0.0):
    """A server of `capacity` workers busy `service` seconds a request, a queue past them."""
    return lambda n: latency + service * max(1.0, n / capacity)


def test_over_a_50_ms_link_to_an_idle_server_the_limit_grows_to_its_maximum():
    limit = LearnedLimit(64)
    seen = Clock(limit).trips(20, rtt=0.050)
    assert seen[0] == AUTO_START and seen[-1] == 64
    assert seen == sorted(seen)  # never cut: 50 ms of latency is no queue
    assert limit.baseline == pytest.approx(0.050)


def test_the_limit_settles_near_the_servers_workers_and_keeps_little_queue():
    for capacity in (4, 32):
        limit = LearnedLimit(64)
        seen = Clock(limit).trips(60, server=workers(capacity, 0.2, latency=0.01))
        settled = seen[-30:]
        assert capacity <= min(settled) and max(settled) <= capacity * 1.25 + 1, (capacity, settled)


def test_when_answers_take_twice_as_long_the_limit_falls():
    limit = LearnedLimit(64)
    clock = Clock(limit)
    clock.trips(20, rtt=0.1)
    assert limit.current == 64
    # The server now queues: twice the time at the same concurrency.
    seen = clock.trips(4, server=lambda n: 0.1 * max(1.0, n / 32))
    assert seen[-1] <= 40 and min(seen) >= 32  # cut by what waits, never below what the server serves


@pytest.mark.parametrize("refused", [True, False], ids=["429-503", "timeout"])
def test_a_refusal_or_a_timeout_halves_the_limit_once_for_the_requests_in_flight_together(refused):
    limit = LearnedLimit(64)
    clock = Clock(limit)
    clock.trips(20, rtt=0.1)
    assert limit.current == 64
    sent = clock.now
    limit.dropped(sent, 0.05, refused)
    assert limit.current == 32
    limit.dropped(sent, 0.06, refused)  # sent with the first: the same overload
    limit.dropped(sent + 0.01, 0.05, refused)  # sent before the cut's round trip was over
    assert limit.current == 32
    limit.dropped(sent + 0.5, 0.1, refused)  # a later one: cut again
    assert limit.current == 16
    assert limit.figures.refused == (3 * refused + refused)


def test_the_limit_stays_within_one_and_its_maximum():
    limit = LearnedLimit(10, start=50)
    assert limit.current == 10
    Clock(limit).trips(20, rtt=0.01)
    assert limit.current == 10
    for i in range(20):
        limit.dropped(100.0 + i * 10, 1.0, True)
    assert limit.current == 1


def test_a_slower_path_is_measured_again_and_no_longer_reads_as_a_queue():
    limit = LearnedLimit(64)
    clock = Clock(limit)
    clock.trips(20, rtt=0.05)
    # The route to the server gets longer for good: 100 ms whatever the concurrency.
    seen = clock.trips(int(2 * REMEASURE / 0.1), rtt=0.1)
    assert limit.baseline == pytest.approx(0.1)
    assert seen[-1] == 64


def test_a_fixed_limit_never_moves_and_reports_what_the_answers_took():
    limit = make_limit(False, 16)
    assert isinstance(limit, FixedLimit)
    Clock(limit).trips(10, rtt=0.2)
    limit.dropped(0.0, 1.0, True)
    assert limit.current == 16
    figures = limit.figures.as_dict()
    assert figures["concurrency"] == {"min": 16, "median": 16, "max": 16}
    assert figures["setting"] == "16" and figures["refused"] == 1
    assert figures["latency_ms"]["baseline"] == pytest.approx(200, rel=0.01)
    assert figures["latency_ms"]["p95"] == pytest.approx(200, rel=0.06)


def test_figures_as_the_summary_reports_them():
    a = CapacityFigures("auto", 64)
    for seconds, limit in ((0.1, 4), (0.1, 8), (0.2, 8), (1.0, 20)):
        a.answered(seconds, limit)
    a.baseline, a.refused, a.final = 0.08, 2, 20
    out = a.as_dict()
    assert out["concurrency"] == {"min": 4, "median": 8, "max": 20}
    assert out["latency_ms"]["baseline"] == 80.0 and out["refused"] == 2
    assert out["latency_ms"]["p95"] == pytest.approx(1000, rel=0.06)


def test_a_limit_told_of_a_share_of_the_answers_learns_in_as_many_round_trips():
    """A shard's: it sends its quarter of the limit and hears of those answers only."""
    limit = LearnedLimit(64)
    limit.seen = 0.25
    server, now, seen = workers(32, 0.2, latency=0.01), 0.0, []
    for _ in range(60):
        n = limit.current
        for _ in range(max(1, n // 4)):
            limit.succeeded(now, server(n), n)
        now += server(n)
        seen.append(limit.current)
        if len(seen) == 4:
            assert limit.baseline == pytest.approx(0.21)  # four answers of its own, one a round trip
    settled = seen[-30:]
    assert min(settled) >= 32 and max(settled) <= 32 * 1.25 + 1, settled
