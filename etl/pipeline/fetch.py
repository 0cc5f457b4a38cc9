"""Fetch one window: every point of it, whatever the server caps its answers at.

An answer may lack points in two ways: it holds as many as the `count` asked, or the server capped it
below that without a word (the document gives `count` no default or maximum; `etl.client.count_cap` learns
the cap). An answer that may have been cut and stops before the window's end is continued from its last
stamp: the server's bounds are inclusive, so that point comes again and is dropped. Once an answer is
known to be cut, the rest of its window is asked in pieces the cap fits, all at once.

Most answers are shorter than the longest seen on their route, so they cannot have been cut and cost
nothing more. One as long as the longest (the first of a route, or one of many equal windows ending at
the server's clock) is first checked by asking a wider span ending at the same stamp: more points
there mean the cap is above this answer's length, and every later answer up to that length is cleared
too. Only when the wider span is no longer is the answer continued.

A server that ignores the interval asked would make continuations go on for ever (each resuming 1 ms
later): an answer that would be continued although less than half of it is new ground is a stall, and
after `MAX_STALLS` of them the window fails. The first answer of a window, read as the document says,
must also fit it: stamps in another time format fail the window at once
(`etl.pipeline.clean.TimeFormatError`), before any continuation. And a window takes at most
`retry.deadline` seconds in all, however many requests it needs, besides the time a 429 held every
request of the run (a throttle on other parameters does not use up this window's time).
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from etl.client import MonitoringClient
from etl.client.count_cap import Verdict
from etl.client.models import Candles, Points
from etl.client.retry import within
from etl.errors import DataError, NetworkError, RequestRejected
from etl.model import ParamKind, Series, Window
from etl.pipeline.clean import check_collapse, check_outside
from etl.pipeline.counts import Counts
from etl.timeutil import DAY_MS, iso

# Pieces are sized to hold this share of the cap at the density seen so far: points are not spread
# evenly (gaps, jitter), and a piece that overflows costs a continuation in sequence.
PIECE_FILL = 0.75
# At most this many pieces at once: a density misjudged from a dense start costs few requests, and a
# piece that overflows is cut again at its own density.
MAX_PIECES = 64
# Continuations of a window that bring less than half an answer of new points, before the window fails.
MAX_STALLS = 3


class StalledError(DataError):
    """Answers that would be continued do not advance in time."""


class _Stalls:
    """The stalls of one window, its pieces included."""

    def __init__(self, window: Window) -> None:
        self.window, self.count = window, 0

    def check(self, start: int, end: int, points: int, new: int, last: int) -> bool:
        """Whether an answer of `points` points, `new` of them new ground, stalled (raises after too many)."""
        if new * 2 >= points:
            return False
        self.count += 1
        if self.count > MAX_STALLS:
            raise StalledError(
                f"the server's answers do not advance in time: {self.count} answers to continue from "
                f"{iso(start)} (to {iso(end)}) held {points} points of which {new} new, the last at "
                f"{iso(last)}; does it ignore the interval asked?"
            )
        return True


def _concat(parts: list[Points | Candles]) -> Points | Candles:
    first = parts[0]
    if len(parts) == 1:
        return first
    fields = first.__dataclass_fields__
    return type(first)(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in fields})


def _where(data: Points | Candles, keep: np.ndarray) -> Points | Candles:
    if keep.all():
        return data
    return type(data)(**{f: getattr(data, f)[keep] for f in data.__dataclass_fields__})


async def fetch_window(
    client: MonitoringClient, window: Window, max_points: int, counts: Counts
) -> Points | Candles:
    """Every point the server has in the window, as it sent them (the point at `end` included: the bounds
    are inclusive). `counts`: requests; continuations, the requests spent on answers that may have
    been cut (wider spans asked to rule a cap out, and the rest asked from an answer's last stamp);
    splits, rests of a window asked in several pieces at once."""
    start, end = window.request()
    deadline = client.session.policy.deadline
    try:
        async with within(deadline, client.session.gate):  # the 429 gate's holds not counted
            parts = await _fetch(client, window, start, end, max_points, counts, _Stalls(window), True)
    except TimeoutError:
        raise NetworkError(
            f"not fetched within retry.deadline ({deadline:g}s): the server answers too slowly",
            reason="deadline",
        ) from None
    return _concat(parts)


async def _fetch(
    client: MonitoringClient,
    window: Window,
    start: int,
    end: int,
    max_points: int,
    counts: Counts,
    stalls: _Stalls,
    first: bool = False,
) -> list[Points | Candles]:
    """The points in [start, end], both included (`first`: the window's first request)."""
    kind, series = window.kind, window.series
    count = None if kind is ParamKind.SIGNAL and series is Series.RAW else max_points  # /db/signal takes none
    parts: list[Points | Candles] = []
    seen: int | None = None  # continuing: points up to this stamp came already
    suspected = 0  # continuing on suspicion: the length of the answer that may have been cut
    while True:
        count = client.caps.count(kind, series, count)
        data = await _series(client, window, start, end, count, counts)
        count = client.caps.count(kind, series, count)  # as sent, when a refusal made it smaller
        counts.requests += 1
        points = len(data)
        last = int(data.ts.max()) if points else end
        if first:
            check_outside(window, data.ts, int(((data.ts < start) | (data.ts > end)).sum()))
            first = False
        check_collapse(window, data.ts)
        if seen is not None:
            data = _where(data, data.ts > seen)
            if suspected and len(data):
                client.caps.cut(kind, series, suspected)
        parts.append(data)
        verdict = client.caps.verdict(kind, series, points, count)
        if last >= end or verdict is Verdict.COMPLETE:
            return parts
        new = int(((data.ts >= start) & (data.ts <= end)).sum())  # after dropping what came already
        stalled = stalls.check(start, end, points, new, last)
        # From `last` again (inclusive bounds), or past `start` when every point so far shares one stamp
        # (of those only the first is kept anyway).
        resume = max(last, start + 1)
        if verdict is Verdict.SUSPECT:
            async with client.caps.lock(kind, series):
                verdict = client.caps.verdict(kind, series, points, count)  # what others learned meanwhile
                if (
                    verdict is Verdict.COMPLETE
                    or verdict is Verdict.SUSPECT
                    and await _cap_is_above(client, window, start, end, count, points, counts)
                ):
                    return parts
        if verdict is Verdict.FULL and not stalled:  # a stalled answer tells no density: go on in sequence
            limit = min(c for c in (count, client.caps.cap(kind, series)) if c is not None)
            rest = (end - resume) * points / max(last - start, 1)
            pieces = min(math.ceil(rest / (PIECE_FILL * limit)), MAX_PIECES, end - resume)
            if pieces > 1:
                counts.splits += 1
                parts += await _pieces(client, window, resume, end, pieces, max_points, counts, last, stalls)
                return parts
        counts.continuations += 1
        start, seen, suspected = resume, last, points if verdict is Verdict.SUSPECT else 0


async def _series(
    client: MonitoringClient, window: Window, start: int, end: int, count: int | None, counts: Counts
) -> Points | Candles:
    """One answer; a 400 to a count the server finds too large is asked again with a smaller one."""
    while True:
        try:
            return await client.series(window.param_id, window.kind, window.series, start, end, count=count)
        except RequestRejected as exc:
            if (
                exc.status != 400
                or count is None
                or (count := client.caps.refused(window.kind, window.series, count)) is None
            ):
                raise
            counts.requests += 1


def _wider(series: Series, start: int, end: int) -> int:
    """The start of a span ending at `end` that likely holds more points than [start, end] (raw requests
    may span 24 h; aggregates have no limit: a week or three times as long, whichever is longer)."""
    if series is Series.RAW:
        return end - DAY_MS
    return start - max(3 * (end - start), 7 * DAY_MS)


async def _cap_is_above(
    client: MonitoringClient,
    window: Window,
    start: int,
    end: int,
    count: int | None,
    points: int,
    counts: Counts,
) -> bool:
    """Whether a wider span ending at `end` holds more than `points` points: then the server's cap is
    above `points`, and an answer of `points` points was not cut."""
    wider = _wider(window.series, start, end)
    if wider >= start:
        return False
    counts.requests += 1
    counts.continuations += 1
    data = await client.series(window.param_id, window.kind, window.series, wider, end, count=count)
    return len(data) > points


async def _pieces(
    client: MonitoringClient,
    window: Window,
    start: int,
    end: int,
    pieces: int,
    max_points: int,
    counts: Counts,
    seen: int,
    stalls: _Stalls,
) -> list[Points | Candles]:
    """[start, end] in `pieces` spans fetched at once; each keeps its points before the next one's start."""
    bounds = [start + (end - start) * i // pieces for i in range(pieces)] + [end]
    fetched = await asyncio.gather(
        *(
            _fetch(client, window, lo, hi, max_points, counts, stalls)
            for lo, hi in zip(bounds, bounds[1:], strict=False)
        )
    )
    out = []
    for i, parts in enumerate(fetched):
        upper = bounds[i + 1] if i + 1 < pieces else end + 1
        out += [_where(p, (p.ts > seen) & (p.ts < upper)) for p in parts]
    return out
