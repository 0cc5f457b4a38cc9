"""The retry policy as data, the run-wide throttle that 429s close, and the counters both feed."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, stop_after_delay

from etl.errors import InvalidResponse, NetworkError, ServerError, SessionRejected, TlsError

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry one request. Applies to timeouts, connection errors, invalid
    JSON bodies, a session refused right after a new sign-in, and the statuses in RETRYABLE_STATUSES;
    never to other 4xx."""

    attempts: int = 6
    backoff_initial: float = 0.5  # seconds before the first retry; doubles each time
    backoff_max: float = 30.0
    deadline: float | None = 300.0  # no new attempt after this many seconds on one request
    retry_after_max: float = 120.0  # a server asking for more than this is not waited for


@dataclass
class ClientStats:
    requests: int = 0
    retries: Counter = field(default_factory=Counter)  # reason -> count
    relogins: int = 0
    throttled_seconds: float = 0.0
    bytes_received: int = 0

    def add(self, other: ClientStats) -> None:
        """Fold in the counts of another client (one per Dask task)."""
        self.requests += other.requests
        self.retries.update(other.retries)
        self.relogins += other.relogins
        self.throttled_seconds += other.throttled_seconds
        self.bytes_received += other.bytes_received

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "retries": sum(self.retries.values()),
            "retries_by_reason": dict(sorted(self.retries.items())),
            "relogins": self.relogins,
            "throttled_seconds": round(self.throttled_seconds, 3),
            "bytes_received": self.bytes_received,
        }


class RateGate:
    """A 429 pauses every request of the client, not just the one that got it."""

    def __init__(self, stats: ClientStats) -> None:
        self._resume_at = 0.0
        self._stats = stats

    def pause(self, seconds: float) -> None:
        now = time.monotonic()
        if now + seconds > self._resume_at:
            # Wall-clock time held back, once, however many requests wait behind the gate.
            self._stats.throttled_seconds += now + seconds - max(self._resume_at, now)
            self._resume_at = now + seconds

    async def wait(self) -> None:
        while (delay := self._resume_at - time.monotonic()) > 0:
            await asyncio.sleep(delay)


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, TlsError):
        return False
    return isinstance(exc, ServerError | NetworkError | InvalidResponse | SessionRejected | httpx.TransportError)


def retry_reason(exc: BaseException) -> str:
    if isinstance(exc, ServerError):
        return f"http_{exc.status}"
    if isinstance(exc, InvalidResponse):
        return "invalid_body"
    if isinstance(exc, SessionRejected):
        return "session_rejected"
    if isinstance(exc, NetworkError):
        return getattr(exc, "reason", "network")
    return type(exc).__name__


def _wait(policy: RetryPolicy):
    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            # Honour the server, plus a little jitter so throttled requests do not return in lockstep.
            return min(retry_after, policy.retry_after_max) + random.uniform(0, 0.1 * max(retry_after, 0.1))
        cap = min(policy.backoff_max, policy.backoff_initial * 2 ** (state.attempt_number - 1))
        return random.uniform(cap / 2, cap)  # "equal jitter": never zero, never over the cap

    return wait


def retrying(policy: RetryPolicy, stats: ClientStats) -> AsyncRetrying:
    stop = stop_after_attempt(max(1, policy.attempts))
    if policy.deadline:
        stop = stop | stop_after_delay(policy.deadline)

    def count(state: RetryCallState) -> None:
        stats.retries[retry_reason(state.outcome.exception())] += 1

    return AsyncRetrying(
        stop=stop,
        wait=_wait(policy),
        retry=retry_if_exception(is_retryable),
        before_sleep=count,
        reraise=False,
    )
