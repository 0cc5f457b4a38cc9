"""What series answers tell about the server's silent cap on points per answer.

The document gives `count` neither a default nor a maximum, so a server may return fewer points than
asked without a word: the first N of the interval, in time order. Such a cap is taken to be the same
for every answer of one route (parameter kind and series), so every answer bounds it from below: an
answer shorter than the longest one seen on its route cannot have been cut. One as long as the longest
may have been; asking for the rest tells, and once the rest proves it cut its length is the cap.

A server may instead refuse a `count` above its maximum (400): the count is then halved until one is
accepted, and that one is sent on the route from then on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import Enum

from etl.model import ParamKind, Series

MIN_COUNT = 100  # a 400 at this count is not about the count


class Verdict(Enum):
    COMPLETE = "complete"  # shorter than the cap can be: every point of the interval is in it
    SUSPECT = "suspect"  # as long as the longest answer seen: ask for the rest to find out
    FULL = "full"  # as long as the count asked or the known cap: cut, almost surely


@dataclass(slots=True)
class _Route:
    longest: int = 0
    cap: int | None = None
    count: int | None = None  # the largest count known to be accepted, once a larger one was refused
    # Held while one answer's doubt is settled: the many equal answers that arrive together wait for
    # what it learns instead of each asking again.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _route(kind: ParamKind, series: Series) -> tuple[ParamKind, Series]:
    # Aggregates of signal parameters come from the physical routes; raw ones from /db/signal.
    return (ParamKind.PHYSICAL if kind is ParamKind.SIGNAL and series is not Series.RAW else kind, series)


class AnswerCaps:
    """Per route: the longest answer seen, and the cap once an answer proved cut."""

    def __init__(self) -> None:
        self._routes: dict[tuple[ParamKind, Series], _Route] = {}

    def _get(self, kind: ParamKind, series: Series) -> _Route:
        key = _route(kind, series)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = _Route()
        return route

    def saw(self, kind: ParamKind, series: Series, points: int) -> None:
        """An answer of `points` points came (before it is judged)."""
        route = self._get(kind, series)
        if points > route.longest:
            route.longest = points

    def verdict(self, kind: ParamKind, series: Series, points: int, count: int | None) -> Verdict:
        """Whether an answer of `points` points, `count` asked (None: no count sent), may lack some."""
        route = self._get(kind, series)
        if count is not None and points >= count or route.cap is not None and points >= route.cap:
            return Verdict.FULL
        if route.cap is None and points >= route.longest:
            return Verdict.SUSPECT
        return Verdict.COMPLETE

    def cut(self, kind: ParamKind, series: Series, points: int) -> None:
        """An answer of `points` points (fewer than asked) proved cut: the server caps answers there."""
        route = self._get(kind, series)
        route.cap = points if route.cap is None else min(route.cap, points)

    def count(self, kind: ParamKind, series: Series, wanted: int | None) -> int | None:
        """The count to send: the one wanted, unless the server refused one that large."""
        accepted = self._get(kind, series).count
        return wanted if wanted is None or accepted is None else min(wanted, accepted)

    def refused(self, kind: ParamKind, series: Series, count: int) -> int | None:
        """A request with `count` was refused (400): the smaller count to try, None when none is left."""
        if count <= MIN_COUNT:
            return None
        route = self._get(kind, series)
        route.count = min(route.count or count, max(count // 2, MIN_COUNT))
        return route.count

    def cap(self, kind: ParamKind, series: Series) -> int | None:
        return self._get(kind, series).cap

    def known(self) -> dict[str, list[int | None]]:
        """What the answers taught, per route ("kind/series": [longest, cap, count]): kept between runs,
        so that a run need not ask again to clear its first answers."""
        return {
            f"{kind.value}/{series.value}": [r.longest, r.cap, r.count]
            for (kind, series), r in sorted(self._routes.items())
            if r.longest or r.cap is not None or r.count is not None
        }

    def learn(self, known: dict[str, list[int | None]]) -> None:
        """What `known` gave (an earlier run's); anything unreadable in it is left out."""
        for route, values in known.items():
            try:
                kind, series = route.split("/")
                longest, cap, count = values
                target = self._get(ParamKind(kind), Series(series))
            except (ValueError, TypeError):
                continue
            target.longest = max(target.longest, int(longest or 0))
            if cap is not None:
                target.cap = int(cap) if target.cap is None else min(target.cap, int(cap))
            if count is not None:
                target.count = int(count) if target.count is None else min(target.count, int(count))

    def lock(self, kind: ParamKind, series: Series) -> asyncio.Lock:
        return self._get(kind, series).lock
