"""The retry policy as data, the retry loop a request enters after its first failure, the run-wide
throttle that 429s close, and the counters they feed."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from etl.client.concurrency import CapacityFigures, CapacityRecord
from etl.client.purpose import PURPOSES
from etl.errors import EtlError, RetriesExhausted
from etl.support import redact

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry one request: after an error whose class says `retryable` (timeouts,
    connection errors, 5xx and 429, unreadable answers, sessions refused even after signing in again)."""

    attempts: int = 6
    backoff_initial: float = 0.5  # seconds before the first retry; doubles each time
    backoff_max: float = 30.0
    deadline: float | None = 300.0  # seconds for one window (or one request), all attempts together
    retry_after_max: float = 120.0  # the longest wait a Retry-After is honoured with
    retry_after_default: float = 1.0  # the wait after a 429 whose Retry-After is missing or unreadable

    def gives_up(self, attempts: int, seconds: float) -> bool:
        """No more attempts after `attempts` failed ones that took `seconds` in all."""
        return attempts >= max(1, self.attempts) or (self.deadline is not None and seconds >= self.deadline)

    def honoured(self, retry_after: float | None) -> float:
        """The wait a Retry-After (None: missing or unreadable) is honoured with: capped."""
        return min(self.retry_after_default if retry_after is None else retry_after, self.retry_after_max)

    def delay(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if getattr(error, "status", None) == 429 or getattr(error, "retry_after", None) is not None:
            # Honour the server (capped), plus a little jitter so throttled requests do not return in
            # lockstep.
            wait = self.honoured(getattr(error, "retry_after", None))
            return wait + random.uniform(0, 0.1 * max(wait, 0.1))
        cap = min(self.backoff_max, self.backoff_initial * 2 ** (attempt - 1))
        return random.uniform(cap / 2, cap)  # "equal jitter": never zero, never over the cap


class ClientRecord(TypedDict):
    """`ClientStats` in the run summary's JSON form."""

    requests: int
    retries: int
    retries_by_reason: dict[str, int]
    relogins: int
    throttled_seconds: float
    bytes_received: int
    requests_by_purpose: dict[str, int]
    capacity: CapacityRecord


@dataclass
class ClientStats:
    requests: int = 0  # every request on the wire: sign-ins, resends and probes too
    retries: Counter[str] = field(default_factory=Counter)  # reason -> count
    relogins: int = 0  # sign-ins after a session ended
    throttled_seconds: float = 0.0
    bytes_received: int = 0
    purposes: Counter[str] = field(default_factory=Counter)  # what each request was for (client/purpose.py)
    capacity: CapacityFigures = field(default_factory=CapacityFigures)  # the limit's (client/concurrency.py)
    gone: set[int] = field(default_factory=set)  # parameters whose series answered 404 (ParameterGone)

    def add(self, other: ClientStats) -> None:
        """Fold in the counts of another client (one per Dask task; the run's budget counted its answers in
        `capacity`)."""
        self.gone |= other.gone
        self.requests += other.requests
        self.retries.update(other.retries)
        self.relogins += other.relogins
        self.throttled_seconds += other.throttled_seconds
        self.bytes_received += other.bytes_received
        self.purposes.update(other.purposes)

    def as_dict(self) -> ClientRecord:
        return {
            "requests": self.requests,
            "retries": sum(self.retries.values()),
            "retries_by_reason": dict(sorted(self.retries.items())),
            "relogins": self.relogins,
            "throttled_seconds": round(self.throttled_seconds, 3),
            "bytes_received": self.bytes_received,
            "requests_by_purpose": {p: self.purposes[p] for p in PURPOSES if self.purposes[p]},
            "capacity": self.capacity.as_dict(),
        }


class RateGate:
    """A 429 pauses every request of the client, not just the one that got it.

    The gate also counts the answers that got through it (`passed`): a request throttled to its end while
    others were answered was throttled alone (a limit on some parameters, or a rate that only some
    requests fit in), not the whole client. It adds up the time it held every request (`held`), which
    a window's deadline does not count (`within`). And it can be told when the run ends (`ends_at`): a
    pause that would hold every request past then calls the run's `on_past` at once, for waiting would
    only end in the run's end.
    """

    def __init__(self, stats: ClientStats) -> None:
        self._resume_at = 0.0
        self._stats = stats
        self.passed = 0
        self.held = 0.0  # seconds, including the rest of the current pause
        self._end: tuple[float, Callable[[], None]] | None = None

    def ends_at(self, when: float, on_past: Callable[[], None]) -> None:
        """Call `on_past` once a pause reaches past `when` (time.monotonic())."""
        self._end = (when, on_past)

    def answered(self) -> None:
        """An answer got through (not a 429)."""
        self.passed += 1

    def pause(self, seconds: float) -> None:
        now = time.monotonic()
        if now + seconds > self._resume_at:
            # Wall-clock time held back, once, however many requests wait behind the gate.
            added = now + seconds - max(self._resume_at, now)
            self._stats.throttled_seconds += added
            self.held += added
            self._resume_at = now + seconds
            if self._end is not None and self._resume_at >= self._end[0]:
                self._end[1]()

    async def wait(self) -> bool:
        """Hold while the gate is closed; whether it was."""
        waited = False
        while (delay := self._resume_at - time.monotonic()) > 0:
            waited = True
            await asyncio.sleep(delay)
        return waited


@asynccontextmanager
async def within(seconds: float | None, gate: RateGate) -> AsyncIterator[None]:
    """`asyncio.timeout(seconds)` (TimeoutError when it passes), not counting the time `gate` held every
    request meanwhile: a throttle on other requests does not use up this work's own time."""
    if seconds is None:
        yield
        return
    loop = asyncio.get_running_loop()
    held, due = gate.held, loop.time() + seconds
    handle: asyncio.TimerHandle
    async with asyncio.timeout(None) as timeout:

        def check() -> None:
            nonlocal handle
            when = due + gate.held - held
            if when > loop.time():
                handle = loop.call_at(when, check)
            else:
                timeout.reschedule(loop.time())

        handle = loop.call_at(due, check)
        try:
            yield
        finally:
            handle.cancel()


async def retrying(once: Callable[[], Awaitable[T]], policy: RetryPolicy, stats: ClientStats, what: str) -> T:
    """`once()`, and again as the policy allows after a retryable failure (`retry`)."""
    started = time.monotonic()
    try:
        return await once()
    except EtlError as exc:
        if not exc.retryable:
            raise
        first = exc
    return await retry(first, once, policy, stats, what, started)


async def retry(
    first: EtlError,
    again: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    stats: ClientStats,
    what: str,
    started: float,
) -> T:
    """Try `again` after the first attempt failed with `first`, while errors are retryable and the
    policy allows; then RetriesExhausted, carrying the last error's exit code and fatality. Entered
    only after a failure: a request that succeeds at once never comes here."""
    error, attempts = first, 1
    while True:
        if not error.retryable:
            raise error
        elapsed = time.monotonic() - started
        delay = policy.delay(attempts, error)
        # Waiting past the deadline would only end in giving up: give up now.
        if policy.gives_up(attempts, elapsed) or (
            policy.deadline is not None and elapsed + delay >= policy.deadline
        ):
            cause = str(error).removeprefix(f"{what}: ")
            raise RetriesExhausted(
                redact.redact(f"{what}: gave up after {attempts} attempt(s) in {elapsed:.1f}s: {cause}"),
                error,
                attempts,
            ) from None
        stats.retries[getattr(error, "reason", type(error).__name__)] += 1
        await asyncio.sleep(delay)
        attempts += 1
        try:
            return await again()
        except EtlError as exc:
            error = exc
