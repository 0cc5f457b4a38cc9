"""How many of a session's requests are on the wire at once: the limit the senders admit them by, fixed or
learned from each answer, and the figures a run reports of it.

`FixedLimit` is a number (`extract.concurrency: 16`). `LearnedLimit` (`extract.concurrency: auto`) reads
the server as TCP Vegas reads a network, and as Netflix's concurrency-limits (`VegasLimit`) and Envoy's
adaptive concurrency filter read a service: each answer's time is compared, as a ratio, with a baseline,
the time answers take when nothing of ours waits at the server. With `n` requests in flight taking `rtt`
where the baseline is `base`, about `n x (1 - base / rtt)` of them wait in the server's queue (Little's
law). The estimate is taken once a round (the answers to the requests sent since the last change, their
mean time), and:

- while the queue estimate is small, the limit grows: doubling until a queue first shows (slow start),
  then by its square root a round;
- while it stays within a band, the limit holds: the server is busy, and a few of ours wait so that it
  never idles between two of them;
- past the band, the limit is cut by what waits in excess, at most by half a round, and never below
  `AUTO_START` (with fewer in flight, etl's own work no longer overlaps the server's: a run on a busy
  machine, whose own slowness reads as a queue, would crawl);
- a 429, a 503 or a timeout halves it, once for the requests that were in flight together, down to 1.

Latency alone is no queue: over a 50 ms link the ratio stays near 1 whatever the limit, and the limit
grows. A difference the answers' own spread explains (two standard errors, the spread as the baseline's
round saw it) is no queue either. The baseline is the first round's mean, or a later round's when that is
faster beyond the spread, measured again now and then (`REMEASURE` seconds, and after
`SUSPECT_CUTS` cuts in a row, which a true queue never needs): the limit is halved for one round, so that
nothing of ours waits, and that round's time becomes the baseline, up or down. Without that a baseline
taken on a quiet server would read every later slowdown of the path as a queue, and one taken while we
queued would hide queues for ever.

A limit only counts and computes; the session's senders ask it how many may fly (`current`) and tell it
what came back (`succeeded`, `dropped`). Times are the caller's clock (seconds): the limit reads none.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

log = logging.getLogger(__name__)

AUTO_START = 4  # requests in flight a learned limit starts from
AUTO_MAX = 64  # the default of extract.max_concurrency
REMEASURE = 30.0  # seconds between two measurements of the baseline
SUSPECT_CUTS = 5  # rounds in a row that cut the limit: the baseline is measured again
CALM_ROUNDS = 8  # rounds without a queue after a cut before the limit tries one more request
BACKOFF_MAX = 3  # that wait doubles for each try that met a queue at once, up to 8 times as long
ROUND_MIN_SAMPLES = 8
NOISE_Z = 2.0  # a round's excess over the baseline counts past this many standard errors
MEASURE_SAMPLES = 8  # answers a baseline is the mean of, at least
SEEN_SAMPLES = 4  # answers of a baseline or a slow start's round at least, for a limit told of a share
ROUND_MIN_SECONDS = 0.05  # a round spans at least this: a pause of the event loop is not a queue
_BUCKET = math.log(1.05)  # latency histogram: buckets 5% wide


def queue_band(limit: float) -> tuple[float, float]:
    """The queue estimate under which the limit grows, and over which it is cut: less than one request
    while the limit is small, an eighth of it when it is large (the ratio's noise grows with it)."""
    return max(0.25, limit / 16), max(0.5, limit / 8)


class ConcurrencyRecord(TypedDict):
    min: int | None
    median: int | None
    max: int | None


class LatencyRecord(TypedDict):
    baseline: float | None  # milliseconds
    p95: float | None


class CapacityRecord(TypedDict):
    """`CapacityFigures` in the run summary's JSON form."""

    setting: str
    max: int
    concurrency: ConcurrencyRecord
    latency_ms: LatencyRecord
    refused: int


@dataclass
class CapacityFigures:
    """What a session's limit saw, as plain data: the limit at each answer (`limits`: value -> answers), the
    answers' times (`latency`: 5% buckets -> answers), the baseline last used, the answers that refused a
    request for load (429, 503), the limit at the end."""

    setting: str = "16"  # "auto", or the fixed number
    maximum: int = 16
    limits: Counter[int] = field(default_factory=Counter)
    latency: Counter[int] = field(default_factory=Counter)
    baseline: float | None = None  # seconds
    refused: int = 0
    final: int | None = None

    def answered(self, seconds: float, limit: int) -> None:
        self.limits[limit] += 1
        self.latency[math.floor(math.log(max(seconds, 1e-6) * 1000) / _BUCKET)] += 1

    def latency_ms(self, share: float) -> float | None:
        """The time `share` (0-1) of the answers came within, to the bucket's 5%."""
        total = sum(self.latency.values())
        if not total:
            return None
        seen = 0
        for bucket in sorted(self.latency):
            seen += self.latency[bucket]
            if seen >= share * total:
                return round(math.exp((bucket + 1) * _BUCKET), 1)
        raise AssertionError("unreachable")

    def as_dict(self) -> CapacityRecord:
        values = sorted(self.limits)
        median: int | None = None
        if values:
            half, seen = sum(self.limits.values()) / 2, 0
            for value in values:
                seen += self.limits[value]
                if seen >= half:
                    median = value
                    break
        return {
            "setting": self.setting,
            "max": self.maximum,
            "concurrency": {
                "min": values[0] if values else None,
                "median": median,
                "max": values[-1] if values else None,
            },
            "latency_ms": {
                "baseline": None if self.baseline is None else round(self.baseline * 1000, 1),
                "p95": self.latency_ms(0.95),
            },
            "refused": self.refused,
        }


class Limit(Protocol):
    """What admits a session's requests: how many may be on the wire now, told what each answer took."""

    figures: CapacityFigures

    @property
    def current(self) -> int: ...

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        """An answer the server served (2xx), `seconds` after it was `sent`, with `in_flight` requests on the
        wire when it went (itself included)."""

    def dropped(self, sent: float, seconds: float, refused: bool) -> None:
        """No answer for the load: a 429 or 503 (`refused`), or a timeout."""


def _reset(figures: CapacityFigures | None, setting: str, maximum: int, final: int) -> CapacityFigures:
    figures = figures if figures is not None else CapacityFigures()
    figures.setting, figures.maximum, figures.final = setting, maximum, final
    return figures


class _Rounds:
    """The answers to the requests sent since `start`, until there are enough of them for one estimate:
    their mean time and the mean of what was in flight (means, as Little's law relates them: a median
    misses a queue that only some of the requests meet)."""

    def __init__(self) -> None:
        self.start = -math.inf
        self.count = self.in_flight = 0
        self.seconds = self.squares = 0.0

    def restart(self, now: float) -> None:
        self.start, self.count, self.in_flight, self.seconds, self.squares = now, 0, 0, 0.0, 0.0

    def add(self, sent: float, seconds: float, in_flight: int, size: int) -> Round | None:
        """Counted if sent in this round; the round when it is complete."""
        if sent < self.start:
            return None
        self.count += 1
        self.seconds += seconds
        self.squares += seconds * seconds
        self.in_flight += in_flight
        if self.count < size or sent + seconds - self.start < ROUND_MIN_SECONDS:
            return None
        mean = self.seconds / self.count
        spread = math.sqrt(
            max(0.0, self.squares / self.count - mean * mean) * self.count / max(1, self.count - 1)
        )
        return Round(mean, spread, self.count, self.in_flight / self.count)


@dataclass(frozen=True)
class Round:
    """One round's answers: their mean time and standard deviation, how many, the mean in flight."""

    seconds: float
    spread: float
    count: int
    in_flight: float


class FixedLimit:
    """`maximum` requests, always; its rounds only give the run's figures a baseline."""

    def __init__(self, maximum: int, figures: CapacityFigures | None = None) -> None:
        self.maximum = maximum
        self.figures = _reset(figures, str(maximum), maximum, maximum)
        self._rounds = _Rounds()

    @property
    def current(self) -> int:
        return self.maximum

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        self.figures.answered(seconds, self.maximum)
        done = self._rounds.add(sent, seconds, in_flight, max(ROUND_MIN_SAMPLES, self.maximum // 2))
        if done is not None:
            base = self.figures.baseline
            self.figures.baseline = done.seconds if base is None else min(base, done.seconds)
            self._rounds.restart(sent + seconds)

    def dropped(self, sent: float, seconds: float, refused: bool) -> None:
        self.figures.refused += refused


class LearnedLimit:
    """A limit learned from the answers' times and refusals, from `start` up to `maximum` (module
    docstring)."""

    def __init__(self, maximum: int, start: int = AUTO_START, figures: CapacityFigures | None = None) -> None:
        self.maximum = maximum
        self.limit = float(max(1, min(start, maximum)))
        # What a queue alone cuts the limit to at least: a few requests in flight keep etl's own work
        # (decoding, writing) going beside the server's, and a server this small refuses when it must.
        self.floor = float(min(AUTO_START, maximum))
        self.figures = _reset(figures, "auto", maximum, self.current)
        self.baseline: float | None = None
        self._spread, self._measured = 0.0, 1  # the baseline round's standard deviation and answers
        self._rounds = _Rounds()
        self._slow_start = True
        self._cut_at = -math.inf  # requests sent before the last cut do not cut again
        self._cuts = 0  # rounds in a row that cut the limit
        self._drain = False  # the round after a cut only lets the queue before it drain
        self._drain_until = -math.inf  # and, for a limit told of a share of the answers, a round trip
        self._calm_until = math.inf  # such a limit waits as long as the rounds would take if it saw them all
        self._step, self._calm, self._wait = 1.0, 0, 0  # growth after slow start (`_after_cut`)
        self._grew = False  # a step up not yet followed by a round with room
        self._backoff = 0  # steps in a row that met a queue at once
        self._probe: float | None = None  # the limit to go back to after the baseline's round
        self._measured_at: float | None = None  # when the baseline was last measured
        # The share of the source's answers this limit is told of (a shard's, of those of the shards at
        # once): a round waits for as many fewer, or it would span several round trips.
        self.seen = 1.0

    @property
    def current(self) -> int:
        return int(self.limit)

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        self.figures.answered(seconds, self.current)
        measuring = self._probe is not None or self.baseline is None
        # A limit told of a share of the answers measures its baseline and doubles on as many fewer (the
        # shards of a host share their baselines), but cuts and grows after on as many as if it saw them all.
        least = MEASURE_SAMPLES if measuring else ROUND_MIN_SAMPLES
        if measuring or self._slow_start:
            least = max(SEEN_SAMPLES, math.ceil(least * self.seen))
        size = max(least, math.ceil(self.current * self.seen))
        done = self._rounds.add(sent, seconds, in_flight, size)
        if done is not None:
            self._estimate(sent + seconds, done)

    def dropped(self, sent: float, seconds: float, refused: bool) -> None:
        self.figures.refused += refused
        if sent < self._cut_at:
            return
        now = sent + seconds
        if self._probe is not None:  # the baseline's round is lost: back to the limit before it
            self.limit, self._probe = self._probe, None
        self._set(self.limit / 2, now)
        self._after_cut(now)
        # Requests sent within a round trip of the cut met the queue that caused it: they do not cut again.
        self._cut_at = now + (self.baseline or seconds)

    def heard_baseline(self, seconds: float, spread: float, count: int) -> None:
        """A baseline another learner of the same source and path measured (its mean, standard deviation
        and answers): taken when faster. Shards each learn the whole limit, and one that measured while the
        others queued would read their queue as its baseline, and its spread as noise."""
        if self.baseline is not None and seconds < self.baseline:
            self.baseline, self._spread, self._measured = seconds, spread, max(1, count)
            self.figures.baseline = seconds

    def follow(self, limit: float) -> None:
        """The limit the learners of the same source agree on (shards: the mean of theirs): taken as this
        one's, the round under way kept. Each learns from its own share of the answers; without this their
        limits drift apart, and the one that learned fastest takes more than its part."""
        self.limit = max(1.0, min(float(self.maximum), limit))
        self.figures.final = self.current

    @property
    def measured(self) -> tuple[float, float, int] | None:
        """The baseline, its standard deviation and answers, once measured."""
        return None if self.baseline is None else (self.baseline, self._spread, self._measured)

    def _estimate(self, now: float, done: Round) -> None:
        if self._probe is not None or self.baseline is None:  # a round without a queue of ours
            self.baseline, self._spread, self._measured = done.seconds, done.spread, done.count
            self._measured_at = now
            self._set(self._probe or self.limit, now)
            self._probe = None
            return
        if self._drain or now < self._drain_until:  # these requests still waited behind those before the cut
            self._drain = False
            self._rounds.restart(now)
            return
        limit, rtt, in_flight = self.limit, done.seconds, done.in_flight
        # What the answers' own spread (as the baseline's round saw it, without a queue) could explain is
        # no queue: at least this much waits. A round faster than that is the new baseline.
        noise = NOISE_Z * self._spread * math.sqrt(1 / self._measured + 1 / done.count)
        if rtt < self.baseline - noise:
            self.baseline, self._spread, self._measured = rtt, done.spread, done.count
        queue = max(0.0, in_flight * (1 - (self.baseline + noise) / rtt))
        grow, cut = queue_band(limit)
        if queue > cut:
            self._cuts += 1
            # A step that met a queue at once: the next try waits twice as long.
            self._backoff = min(self._backoff + 1, BACKOFF_MAX) if self._grew else 0
            self._grew = False
            self._set(max(self.floor, limit / 2, min(limit, in_flight) - (queue - cut)), now)
            self._after_cut(now)
        else:
            self._cuts = 0
            if queue <= grow and self._grew:  # the last step found room
                self._backoff, self._grew = 0, False
            self._calm = self._calm + 1 if queue <= grow else 0
            if queue > grow or in_flight * 2 < limit:  # the server is busy, or too few requests to tell
                self._slow_start = self._slow_start and queue <= grow
                self._rounds.restart(now)
            elif self._slow_start:
                self._set(limit * 2, now)
            elif self._calm >= self._wait or self._calm and now >= self._calm_until:
                self._set(limit + self._step, now)
                self._calm, self._wait, self._grew = 0, 1, True
                self._step = min(self._step * 2, max(1.0, math.sqrt(self.limit)))
            else:
                self._rounds.restart(now)
        assert self._measured_at is not None
        if self._cuts >= SUSPECT_CUTS or now - self._measured_at >= REMEASURE:
            self._cuts = 0
            self._probe = self.limit
            self._set(self.limit / 2, now)

    def _after_cut(self, now: float) -> None:
        """One more request is tried again only after `CALM_ROUNDS` rounds without a queue, then faster
        while there is room: on a server of few workers one request too many waits a whole service time.
        A limit told of a share of the answers (`seen`) has rounds shorter than the queue takes to drain."""
        self._slow_start = False
        self._drain = True
        self._drain_until = now + (self.baseline or 0.0) * (self.seen < 1)
        if self.seen < 1 and self.baseline is not None:
            self._calm_until = now + self.baseline * (CALM_ROUNDS << self._backoff)
        self._step, self._calm, self._wait = 1.0, 0, CALM_ROUNDS << self._backoff

    def _set(self, limit: float, now: float) -> None:
        before = self.current
        self.limit = max(1.0, min(float(self.maximum), limit))
        if self.current != before and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "requests in flight at most: %d -> %d (latency baseline %s)",
                before,
                self.current,
                self.baseline,
            )
        self.figures.final = self.current
        self.figures.baseline = self.baseline
        self._rounds.restart(now)


def make_limit(
    auto: bool, maximum: int, start: int = AUTO_START, figures: CapacityFigures | None = None
) -> FixedLimit | LearnedLimit:
    """The limit of one session: learned from `start` up to `maximum`, or fixed at `maximum`; its
    figures kept in `figures` (a run's `ClientStats`), if given."""
    return LearnedLimit(maximum, start, figures) if auto else FixedLimit(maximum, figures)
