"""One source's limit kept by several processes (etl/client/budget.py), fed synthetic answers: a budget
divides its limit among its members and learns it from all their answers, a lost member's permits come
back, a member with no permit sends nothing until it gets one, and shards each take their part of a
limit they learn together."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from etl.client import ClientOptions
from etl.client import budget as budget_module
from etl.client.budget import LEASE, Budget, Grant, Member, Part, divide, keep_in_touch
from etl.client.concurrency import AUTO_START, FixedLimit, LearnedLimit
from etl.client.session import Session
from tests.support.turns import until
from tests.unit.client.test_senders import Server


def test_permits_are_divided_by_what_each_member_wants():
    assert divide(8, [10, 10]) == [4, 4]
    assert divide(8, [1, 10]) == [1, 7]
    assert divide(10, [1, 2]) == [5, 5]  # what no one wants is spread: the next request need not wait
    assert divide(0, [3, 3]) == [0, 0]


def test_a_limit_smaller_than_the_members_goes_to_the_first_ones():
    """The floor is the run's: six tasks of a limit of four, not four each."""
    assert divide(4, [50] * 6) == [1, 1, 1, 1, 0, 0]


class Cluster:
    """Members of one budget, each sending what it is granted, all answered after the time `server`
    gives for that many in flight in all: a run's steady state, one round trip after another. Each
    member reports after every round trip, as `keep_in_touch` does every tenth of a second."""

    def __init__(self, budget: Budget, members: int) -> None:
        self.budget, self.now = budget, 0.0
        self.members = [Member(f"task-{i}") for i in range(members)]
        self.offset = self.members[0]._offset - budget._offset  # one process here: the clocks agree

    def trips(self, count: int, server) -> list[int]:
        in_flight = []
        for _ in range(count):
            grants = self.budget.grants(self.now)
            total = sum(grants.get(m.name, 0) for m in self.members)
            took = server(total)
            for member in self.members:
                member.granted, member.version = grants.get(member.name, 0), self.budget.version
                for _ in range(member.granted):
                    member.succeeded(self.now - self.offset, took, member.granted)
            self.now += took
            for member in self.members:
                self.budget.ingest(member.report(wants=50, on_wire=member.granted), self.now)
            in_flight.append(total)
        return in_flight


def workers(capacity: int, service: float):
    return lambda n: service * max(1.0, n / capacity)


@pytest.mark.parametrize("members", [1, 3, 6])
def test_the_members_of_a_budget_keep_as_many_in_flight_as_one_process_would(members):
    """A server of 4 workers: six members never have four each in flight; the limit they share settles
    near the server's workers, as one process's does."""
    budget = Budget(LearnedLimit(64))
    in_flight = Cluster(budget, members).trips(80, workers(4, 0.2))
    settled = in_flight[-40:]
    assert in_flight[0] <= AUTO_START
    assert min(settled) >= 4 and max(settled) <= 6, settled


def test_a_large_server_is_used_whole_by_many_members():
    budget = Budget(LearnedLimit(64))
    in_flight = Cluster(budget, 6).trips(120, workers(32, 0.2))
    assert min(in_flight[-40:]) >= 32 and max(in_flight[-40:]) <= 41, in_flight[-40:]


def test_every_answer_counts_in_the_figures_with_the_members_in_flight():
    limit = FixedLimit(8)
    budget = Budget(limit)
    a, b = Member("a"), Member("b")
    budget.ingest(b.report(wants=5, on_wire=3), 0.0)
    a.succeeded(1.0, 0.2, 2)
    a.dropped(1.1, 0.2, refused=True)
    budget.ingest(a.report(wants=5, on_wire=2), 2.0)
    assert sum(limit.figures.limits.values()) == 1 and limit.figures.refused == 1
    assert budget.grants(2.0) == {"b": 4, "a": 4}


class Told(LearnedLimit):
    """A learned limit that notes what in flight it was told of."""

    def __init__(self) -> None:
        super().__init__(64)
        self.told: list[int] = []

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        self.told.append(in_flight)
        super().succeeded(sent, seconds, in_flight)


def test_answers_sent_before_a_member_heard_of_a_change_count_with_those_before_it():
    """The limit's rounds start at a change; a member hears of it with its next grants."""
    told = Told()
    budget = Budget(told)
    member = Member("a")
    for sent in (0.0, 0.3):  # the baseline's round, then one without a queue: the limit doubles
        for _ in range(8):
            member.succeeded(sent, 0.2, 4)
    budget.ingest(member.report(wants=50, on_wire=4), 1.0)
    assert told.current == 8 and budget.version == 1
    rounds = told._rounds
    for _ in range(8):  # sent after the change, but under the old grants: not the new round's
        member.succeeded(0.6, 0.2, 4)
    budget.ingest(member.report(wants=50, on_wire=4), 1.0)
    assert rounds.count == 0
    member.version = budget.version
    member.succeeded(0.7, 0.2, 8)
    budget.ingest(member.report(wants=50, on_wire=8), 1.0)
    assert rounds.count == 1


def test_a_members_answer_counts_the_others_on_the_wire():
    told = Told()
    budget = Budget(told)
    a, b = Member("a"), Member("b")
    budget.ingest(b.report(wants=5, on_wire=3), 0.0)
    a.succeeded(1.0, 0.2, 2)
    budget.ingest(a.report(wants=5, on_wire=2), 2.0)
    assert told.told == [2 + 3]


def test_a_lost_members_permits_come_back_after_its_lease_and_an_ended_ones_at_once():
    budget = Budget(FixedLimit(8), lease=5.0)
    for name in ("a", "b", "c"):
        budget.ingest(Member(name).report(wants=50, on_wire=0), 0.0)
    assert budget.grants(1.0) == {"a": 3, "b": 3, "c": 2}
    budget.ingest(Member("c").report(wants=50, on_wire=0, done=True), 2.0)
    assert budget.grants(2.0) == {"a": 4, "b": 4}
    budget.ingest(Member("a").report(wants=50, on_wire=0), 4.0)  # b's worker died at 0.0
    assert budget.grants(4.9) == {"a": 4, "b": 4}
    assert budget.grants(5.1) == {"a": 8}


def session(server: Server) -> Session:
    return Session("http://server", "demo", "pw", ClientOptions(max_in_flight=8), transport=server)


def test_a_member_without_permits_sends_nothing_until_it_gets_some():
    async def go() -> list[str]:
        log: list[str] = []
        server = Server(log)
        s = session(server)
        member = Member("task")
        s.limit = member
        server.release("a", "b")
        calls = asyncio.gather(s.call("GET", "/db/a"), s.call("GET", "/db/b"))
        await until(lambda: s.demand == 2, "two requests waiting")
        assert log == [] and s.on_wire == 0
        member.granted = 1
        s.admit()
        await calls
        await s.aclose()
        return log

    assert asyncio.run(go()) == ["sent a", "sent b"]


def test_a_member_that_hears_nothing_from_its_budget_for_a_lease_sends_nothing_more_and_stops(monkeypatch):
    monkeypatch.setattr(budget_module, "LEASE", 0.0)

    async def go() -> tuple[list[int], bool]:
        s = session(Server([]))
        member = Member("task")
        answers: list[Grant | None] = [Grant(3, False, 0)]
        grants: list[int] = []

        async def exchange(report):
            if not answers:
                raise OSError("the scheduler is gone")
            return answers.pop()

        stop = asyncio.Event()
        touch = asyncio.ensure_future(keep_in_touch(member, s, exchange, stop, every=0))
        await until(lambda: member.granted == 3, "the grant applied")
        grants.append(member.granted)
        await until(lambda: member.granted == 0, "the lease over")
        grants.append(member.granted)
        touch.cancel()
        await s.aclose()
        return grants, stop.is_set()

    assert asyncio.run(go()) == ([3, 0], True)
    assert LEASE > 10 * budget_module.REPORT_EVERY  # as configured: many reports a lease


def test_a_stop_reaches_the_member_with_its_permits():
    async def go() -> bool:
        s = session(Server([]))
        stop = asyncio.Event()

        async def exchange(report):
            return Grant(2, True, 0)

        touch = asyncio.ensure_future(keep_in_touch(Member("task"), s, exchange, stop))
        await asyncio.wait_for(stop.wait(), 5)
        touch.cancel()
        await s.aclose()
        return stop.is_set()

    assert asyncio.run(go())


def test_shards_each_take_their_part_of_the_limit_they_learn():
    parts = [Part(FixedLimit(6)) for _ in range(4)]
    for rank, part in enumerate(parts):
        part.among(rank, [1] * 4, others=0)
    assert [p.current for p in parts] == [2, 2, 1, 1]
    parts = [Part(LearnedLimit(64)) for _ in range(6)]  # a limit of 4 among 6: one each, at least
    for rank, part in enumerate(parts):
        part.among(rank, [1] * 6, others=0)
    assert [p.current for p in parts] == [1] * 6


def test_a_shard_learns_with_what_the_others_have_in_flight():
    told = Told()
    part = Part(told)
    part.among(2, [1] * 3, others=7.4)  # a limit of 4: parts of 2, 1 and this run's 1
    part.succeeded(0.0, 0.2, 2)
    part.succeeded(0.0, 0.2, 4)
    # What the others said, or their parts as full as this run's is (4 in flight of 1: 4 times as full).
    assert told.told == [2 + 7, 4 + 3 * 4]
    assert part.in_flight() == 3.0 and part.in_flight() == 0.0  # its own mean, since it last told


def test_reports_cross_processes_as_plain_data():
    member = Member("task")
    member.succeeded(1.0, 0.5, 3)
    report = member.report(wants=4, on_wire=1)
    assert msgpack.unpackb(msgpack.packb(report)) == report  # as Dask's scheduler keeps it
    assert report["samples"][0][1:] == [0.5, 3, 0, 0] and report["wants"] == 4


def test_shards_follow_the_mean_of_their_limits_and_divide_it_by_what_each_wants():
    learned = LearnedLimit(64, start=12)
    part = Part(learned)
    part.among(0, [30, 2, 30], others=0, limits=[4, 8])  # a mean of 8: the run near its end wants 2
    assert learned.current == 8 and part.current == 3
    assert learned.seen == 1 / 3  # its rounds wait for a third of the answers


def test_a_shard_takes_a_faster_baseline_measured_beside_it():
    learned = LearnedLimit(64)
    part = Part(learned)
    part.among(0, [1, 1], others=0, baseline=(0.2, 0.01, 8))
    assert learned.baseline is None  # not measured yet: its own round measures it
    learned.baseline = 0.3
    part.among(0, [1, 1], others=0, baseline=(0.2, 0.01, 8))
    assert part.baseline == (0.2, 0.01, 8)
    part.among(0, [1, 1], others=0, baseline=(0.25, 0.01, 8))
    assert part.baseline == (0.2, 0.01, 8)  # a slower one is not taken
