"""One source's limit on requests in flight, kept by several processes that talk to it at once.

- **Members of a budget** (a run on Dask): the coordinator's `Budget` owns the source's limit, the
  `LearnedLimit` or `FixedLimit` of etl/client/concurrency.py (its own session's, so the run's figures are
  the cluster's). Every client of the run, each task's and the coordinator's own, admits its requests by a
  `Member`: as many as the budget grants it. What a member's answers took goes to the budget in reports,
  a batch of them every `REPORT_EVERY` seconds (`keep_in_touch`), and the budget hands them to the limit
  as it would its own session's, each with the requests the other members had on the wire: the limit
  learns from every answer of the run, and its floor is the run's, not each member's. The budget divides
  the limit among the members by what each has waiting (`divide`). A member the budget has not heard of
  for `LEASE` seconds (its worker died) holds nothing any more, and a member that has not heard from the
  budget for as long admits nothing more: permits are leases.
- **Parts** (shards: runs of one source started together, with no coordinator): each run learns the whole
  limit from its own answers and from the requests the others said they had in flight, and admits its
  `Part` of it, divided among the runs alive by what each has waiting; their limits follow their mean.
  What they tell each other goes through the state storage (etl/state/budget.py).

Times in reports are Unix time, so that processes on other machines agree on them within the clocks'
skew; each end converts to and from its own `time.perf_counter`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from etl.client.concurrency import CapacityFigures, LearnedLimit, Limit

if TYPE_CHECKING:
    from etl.client.session import Session

log = logging.getLogger(__name__)

LEASE = 5.0  # seconds a member's permits outlive the last news between it and its budget
REPORT_EVERY = 0.1  # seconds between two reports of a member
ANSWERED, REFUSED, TIMED_OUT = 0, 1, 2  # what became of a request (a sample's last field)


class Report(TypedDict):
    """What a member tells its budget (msgpack-able: it crosses Dask's scheduler). `samples`: each answer
    since the last report, as [sent (Unix time), seconds, in flight when sent, ANSWERED/REFUSED/TIMED_OUT,
    the version of the grants it was sent under]; `wants`: its requests waiting or on the wire; `done`:
    the member ends, its permits go back."""

    member: str
    samples: list[list[float]]
    wants: int
    on_wire: int
    done: bool


def _unix_offset() -> float:
    """What to add to `time.perf_counter()` to get Unix time."""
    return time.time() - time.perf_counter()


class Grant(NamedTuple):
    """What a member's report gets back: its permits, whether the run is stopping, and the version of the
    grants (it changes with the budget's limit)."""

    permits: int
    stop: bool
    version: int


class Member:
    """A client's part of a budget, as the `Limit` its session admits requests by: `current` is what the
    budget grants (0 admits none), and each answer is kept for the next report."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.figures = CapacityFigures()  # the budget's limit keeps the run's figures, not this
        self.granted = 0
        self.version = 0  # of the grants `granted` comes from
        self._samples: list[list[float]] = []
        self._offset = _unix_offset()

    @property
    def current(self) -> int:
        return self.granted

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        self._samples.append([sent + self._offset, seconds, in_flight, ANSWERED, self.version])

    def dropped(self, sent: float, seconds: float, refused: bool) -> None:
        outcome = REFUSED if refused else TIMED_OUT
        self._samples.append([sent + self._offset, seconds, 0, outcome, self.version])

    def report(self, wants: int, on_wire: int, done: bool = False) -> Report:
        samples, self._samples = self._samples, []
        return {"member": self.name, "samples": samples, "wants": wants, "on_wire": on_wire, "done": done}


@dataclass
class _Lease:
    wants: int = 1
    on_wire: int = 0
    granted: int = 0
    expires: float = 0.0


def divide(total: int, wants: list[int]) -> list[int]:
    """`total` permits among members that want `wants`: as evenly as whole permits allow, none more than it
    wants while another wants more (the first members first, when they cannot all have one), and what no
    one wants spread over them all, so that a member's next request need not wait for a report."""
    grants = [0] * len(wants)
    left = total
    hungry = [i for i, want in enumerate(wants) if want > 0]
    while left and hungry:
        each = max(1, left // len(hungry))
        for i in list(hungry):
            give = min(each, wants[i] - grants[i], left)
            grants[i] += give
            left -= give
            if grants[i] >= wants[i]:
                hungry.remove(i)
            if not left:
                break
    for i in range(len(wants)):
        if not left:
            break
        extra = -(-left // (len(wants) - i))
        grants[i] += extra
        left -= extra
    return grants


class Budget:
    """The limit of a source for clients in several processes: every member's answers feed `limit`, and
    `grants` divides it among the members alive. Times are this process's `time.perf_counter()`."""

    def __init__(self, limit: Limit, lease: float = LEASE) -> None:
        self.limit = limit
        self.lease = lease
        self.version = 0  # of the grants: one more each time the limit changes
        self._since = -math.inf  # when the limit last changed
        self._members: dict[str, _Lease] = {}  # in the order they joined
        self._offset = _unix_offset()

    @property
    def figures(self) -> CapacityFigures:
        return self.limit.figures

    @property
    def members(self) -> list[str]:
        """The members alive, in the order they joined."""
        return list(self._members)

    def ingest(self, report: Report, now: float) -> None:
        """A member's news: its answers go to the limit, its lease is renewed (or ended: `done`)."""
        name = report["member"]
        others = sum(lease.on_wire for member, lease in self._members.items() if member != name)
        for sent, seconds, in_flight, outcome, version in report["samples"]:
            # A change reaches the members with their next grants: until then they sent as before it, and
            # their answers belong with those before it (the limit's rounds start at a change).
            local = sent - self._offset if version >= self.version else min(sent - self._offset, self._since)
            before = self.limit.current
            if outcome == ANSWERED:
                self.limit.succeeded(local, seconds, int(in_flight) + others)
            else:
                self.limit.dropped(local, seconds, outcome == REFUSED)
            if self.limit.current != before:
                self.version += 1
                self._since = local + seconds - 1e-6
        if report["done"]:
            self._members.pop(name, None)
            return
        lease = self._members.setdefault(name, _Lease())
        lease.wants, lease.on_wire, lease.expires = report["wants"], report["on_wire"], now + self.lease

    def grants(self, now: float) -> dict[str, int]:
        """Each live member's permits now; those of members not heard of within the lease come back."""
        for name in [name for name, lease in self._members.items() if lease.expires < now]:
            log.info("no news of %s for %gs: its permits go to the others", name, self.lease)
            del self._members[name]
        leases = list(self._members.values())
        shares = divide(self.limit.current, [lease.wants for lease in leases])
        # Permits a member gives up stay on the wire until its answers come: the members that would send
        # more get them once it says they came, the last to join last, so that together the members never
        # have more than the limit in flight.
        excess = sum(max(0, lease.on_wire - share) for lease, share in zip(leases, shares, strict=True))
        for i in reversed(range(len(leases))):
            take = min(excess, max(0, shares[i] - leases[i].on_wire))
            shares[i] -= take
            excess -= take
        for lease, share in zip(leases, shares, strict=True):
            lease.granted = share
        return dict(zip(self._members, shares, strict=True))


# A member's report, and what it gets back (None: no answer).
Exchange = Callable[[Report], Awaitable[Grant | None]]


async def keep_in_touch(
    member: Member,
    session: Session,
    exchange: Exchange,
    stop: asyncio.Event | None = None,
    busy: bool = True,
    every: float = REPORT_EVERY,
) -> None:
    """A member's side of its budget, until cancelled: a report, then `every` seconds after its answer
    the next (0 for an exchange that waits for its turn); the permits it gets back applied at once
    (waiting requests go), `stop` set when the run stops. Without an answer for `LEASE` seconds the member
    admits nothing more, and stops. A `busy` member (a task: it has work until it ends) wants a request at
    least, so that it gets one before its first is even queued."""
    heard = time.monotonic()
    while True:
        try:
            wants = max(int(busy), session.demand)
            answer = await exchange(member.report(wants, session.on_wire))
        except Exception as exc:  # the budget is unreachable for now: the lease says how long that is fine
            log.debug("no answer from the budget: %s", exc)
            answer = None
        if answer is not None:
            heard = time.monotonic()
            member.granted, member.version = answer.permits, answer.version
            if answer.stop and stop is not None:
                stop.set()
        elif time.monotonic() - heard > LEASE:  # the run that granted its permits is gone, or lost
            member.granted = 0
            if stop is not None:
                stop.set()
        session.admit()
        await asyncio.sleep(every)


class Part:
    """This run's part of a limit it learns together with other runs of the source (shards): `inner`
    learns the whole from this run's answers, each with the requests the others had in flight, and this
    run admits its `rank`-th share of it, divided among the live runs by what each wants (`wants`: its
    requests waiting or on the wire, as `divide` divides a budget), one request at least. At each news of
    the others, its limit follows the mean of theirs (`limits`). What the others have in flight is what
    they last said (`others`), or their parts as full as this run's is when that is more: they said it a
    second ago, and shards started together grow together. `in_flight` is what this run tells the others:
    its mean in flight since it last told them."""

    def __init__(self, inner: Limit) -> None:
        self.inner = inner
        self.figures = inner.figures
        self.rank, self.others = 0, 0
        self.wants = [1]
        self._flights = self._answers = 0

    @property
    def members(self) -> int:
        return len(self.wants)

    @property
    def current(self) -> int:
        return max(1, divide(self.inner.current, self.wants)[self.rank])

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        self._flights += in_flight
        self._answers += 1
        # The others are as full as this run is, or as they said when that is more.
        others = max(self.others, in_flight * self.inner.current / self.current - in_flight)
        self.inner.succeeded(sent, seconds, in_flight + round(others))

    def dropped(self, sent: float, seconds: float, refused: bool) -> None:
        self.inner.dropped(sent, seconds, refused)

    def in_flight(self) -> float:
        """The mean in flight of this run's answers since the last call (0 without answers)."""
        flights, answers = self._flights, self._answers
        self._flights = self._answers = 0
        return flights / answers if answers else 0.0

    @property
    def baseline(self) -> tuple[float, float, int] | None:
        """What this run's limit takes for the source's time without a queue, if it learns: seconds, their
        standard deviation, answers."""
        return self.inner.measured if isinstance(self.inner, LearnedLimit) else None

    def among(
        self,
        rank: int,
        wants: list[int],
        others: float,
        limits: list[int] | None = None,
        baseline: tuple[float, float, int] | None = None,
    ) -> None:
        """Where this run stands among the live runs, what each wants, what the others have in flight and
        learned, and the fastest baseline the others on this host measured. The limit it learns is told of
        this run's answers only: its rounds are as many answers fewer."""
        self.rank, self.wants, self.others = rank, wants or [1], round(others)
        if isinstance(self.inner, LearnedLimit):
            self.inner.seen = 1 / self.members
            if limits:
                self.inner.follow((self.inner.limit + sum(limits)) / (1 + len(limits)))
            if baseline is not None:
                self.inner.heard_baseline(*baseline)
