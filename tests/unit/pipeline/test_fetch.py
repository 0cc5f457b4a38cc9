"""The fetch algorithm (etl/pipeline/fetch.py, etl/client/count_cap.py) against a scripted platform behind
httpx.MockTransport: a silent cap learned, continuations, splits, a stall, a 400 on a large count, and the
wider span that checks an answer as long as the longest seen. Each test names the requests it expects
(start, end, count) and the points that come back. Runs under real caps and faults:
tests/e2e/test_count_cap.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from etl.client import ClientOptions, MonitoringClient, RetryPolicy
from etl.client.count_cap import AnswerCaps
from etl.errors import RequestRejected
from etl.model import ParamKind, Series, Window
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import MAX_STALLS, StalledError, fetch_window
from etl.timeutil import DAY_MS, iso, to_ms

MIN = 60_000
D = to_ms("2024-03-01T00:00:00Z")
SIGNED_IN = httpx.Response(
    200,
    json={"id": 1, "login": "demo"},
    headers=[("set-cookie", "SEMSESSIONID=s1; Path=/"), ("set-cookie", "issToken=t1; Path=/")],
)

Asked = tuple[int, int, int | None]  # a series request's start, end and count (None: no count sent)


def at(minutes: float) -> int:
    """The stamp `minutes` after D."""
    return D + round(minutes * MIN)


def every_minute(first: float, last: float, offset: float = 0) -> np.ndarray:
    """A stamp each minute from `first` to `last` minutes after D (inclusive), `offset` minutes later."""
    return np.array([at(m + offset) for m in range(int(first), int(last) + 1)], np.int64)


class Platform:
    """A server of one physical parameter's raw points, `stamps`, each of value its minutes after D. It
    answers the first points of the interval asked (both bounds included), at most `count` of them, and
    at most `cap` without a word; it refuses a count above `max_count` with a 400; with `ignores_start`
    it answers from its first stamp whatever start is asked. Every series request is noted in `asked`."""

    def __init__(
        self,
        stamps: np.ndarray,
        *,
        cap: int | None = None,
        max_count: int | None = None,
        ignores_start: bool = False,
    ) -> None:
        self.stamps, self.cap, self.max_count, self.ignores_start = stamps, cap, max_count, ignores_start
        self.asked: list[Asked] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/login":
            return SIGNED_IN
        *route, param_id, start_, end_ = request.url.path.split("/")
        assert "/".join(route) == "/db/measure" and param_id == "1"
        start, end = int(start_), int(end_)
        count = int(request.url.params["count"]) if "count" in request.url.params else None
        self.asked.append((start, end, count))
        if self.max_count is not None and count is not None and count > self.max_count:
            return httpx.Response(400, text="count must not exceed the maximum")
        lo = int(self.stamps[0]) if self.ignores_start else start
        ts = self.stamps[(self.stamps >= lo) & (self.stamps <= end)]
        ts = ts[: min(n for n in (count, self.cap, len(ts)) if n is not None)]
        points = [{"timestmp": iso(int(t)), "value": (int(t) - D) / MIN} for t in ts]
        return httpx.Response(200, json={"points": points})

    def within(self, window: Window) -> list[int]:
        """Every stamp the platform has in the window, the one at its end included (as fetch_window
        returns them: cleaning drops that one later)."""
        return [int(t) for t in self.stamps if window.start <= t <= window.end]


@dataclass
class Fetched:
    asked: list[Asked]
    counts: Counts
    stamps: list[int]


def raw(start: float, end: float) -> Window:
    """Parameter 1's raw window from `start` to `end` minutes after D."""
    return Window(1, 1, ParamKind.PHYSICAL, Series.RAW, at(start), at(end))


def fetch(platform: Platform, *windows: Window, max_points: int) -> tuple[list[Fetched], AnswerCaps]:
    """The windows fetched one after the other by one client (what its caps learned carries over): each
    one's requests, counts and the stamps of its points; and the client's caps at the end."""

    async def go() -> tuple[list[Fetched], AnswerCaps]:
        options = ClientOptions(retry=RetryPolicy(attempts=1))
        transport = httpx.MockTransport(platform)
        async with MonitoringClient("http://server", "demo", "pw", options=options, transport=transport) as c:
            out = []
            for window in windows:
                before, counts = len(platform.asked), Counts()
                data = await fetch_window(c, window, max_points, counts)
                assert data.value.tolist() == [(t - D) / MIN for t in data.ts.tolist()]  # values kept
                out.append(Fetched(platform.asked[before:], counts, data.ts.tolist()))
            return out, c.caps

    return asyncio.run(go())


def test_a_silent_cap_is_learned_and_later_windows_come_in_pieces_that_fit() -> None:
    platform = Platform(every_minute(-1440, 2880), cap=100)
    first, second = raw(0, 360), raw(360, 720)
    (one, two), caps = fetch(platform, first, second, max_points=1000)

    assert one.asked[:3] == [
        (at(0), at(360), 1000),  # 100 points, as long as the longest seen: it may have been cut
        (at(360) - DAY_MS, at(360), 1000),  # a wider span: no longer, so the cap may be 100
        (at(99), at(360), 1000),  # continued from its last stamp: 100 points again, 99 new: cut at 100
    ]
    # The rest, 162 minutes at 100 points per 99, in three pieces of 54 minutes: each fits the cap.
    assert sorted(one.asked[3:]) == [
        (at(198), at(252), 1000),
        (at(252), at(306), 1000),
        (at(306), at(360), 1000),
    ]
    assert one.stamps == platform.within(first)  # 361: the stamps 99 and 198 that came twice, kept once
    assert (one.counts.requests, one.counts.continuations, one.counts.splits) == (6, 2, 1)
    assert caps.cap(ParamKind.PHYSICAL, Series.RAW) == 100
    assert caps.cap(ParamKind.PHYSICAL, Series.AVERAGE) is None  # learned for its route only

    # The cap known, the next window's first answer is cut for sure: the rest comes in pieces at once,
    # 261 minutes in four of 65.25, with no wider span and no continuation in sequence.
    piece = 261 * MIN // 4
    assert two.asked[0] == (at(360), at(720), 1000)
    assert sorted(two.asked[1:]) == [(at(459) + i * piece, at(459) + (i + 1) * piece, 1000) for i in range(4)]
    assert two.stamps == platform.within(second)
    assert (two.counts.requests, two.counts.continuations, two.counts.splits) == (5, 0, 1)


def test_an_answer_as_long_as_the_longest_seen_is_checked_once_with_a_wider_span() -> None:
    platform = Platform(every_minute(-1440, 2880, offset=0.5))  # no cap; no stamp on a window's end
    first, second = raw(0, 60), raw(60, 120)
    (one, two), caps = fetch(platform, first, second, max_points=1000)

    # The first answer of the route is the longest seen (60 points): the same end with a start a day
    # earlier brings 1000, so the cap, if any, is above 60, and the answer is whole.
    assert one.asked == [(at(0), at(60), 1000), (at(60) - DAY_MS, at(60), 1000)]
    assert one.stamps == platform.within(first) and len(one.stamps) == 60
    assert (one.counts.requests, one.counts.continuations) == (2, 1)
    # 60 points are fewer than the 1000 seen since: the next window costs one request.
    assert two.asked == [(at(60), at(120), 1000)]
    assert two.stamps == platform.within(second)
    assert caps.cap(ParamKind.PHYSICAL, Series.RAW) is None


def test_an_answer_that_holds_the_count_asked_is_continued_from_its_last_stamp() -> None:
    platform = Platform(every_minute(-1440, 2880, offset=0.5))
    window = raw(0, 150)
    [one], caps = fetch(platform, window, max_points=100)

    # 100 points of 150: the rest (about 50, less than a piece holds) is asked from the last stamp,
    # which comes again and is kept once.
    assert one.asked == [(at(0), at(150), 100), (at(99.5), at(150), 100)]
    assert one.stamps == platform.within(window) and len(one.stamps) == 150
    assert (one.counts.requests, one.counts.continuations, one.counts.splits) == (2, 1, 0)
    assert caps.cap(ParamKind.PHYSICAL, Series.RAW) is None  # a count reached says nothing of a cap


def test_the_rest_of_a_long_window_is_asked_in_pieces_at_once() -> None:
    platform = Platform(every_minute(-1440, 2880, offset=0.5))
    window = raw(0, 600)
    [one], _ = fetch(platform, window, max_points=100)

    # 100 points in the first 99.5 minutes; the rest, 500.5 minutes at that density, in pieces of 75
    # points: seven of 71.5 minutes, each answered whole (72 points at most, under the 100 asked).
    piece = 71.5
    assert one.asked[0] == (at(0), at(600), 100)
    assert sorted(one.asked[1:]) == [
        (at(99.5 + i * piece), at(99.5 + (i + 1) * piece), 100) for i in range(7)
    ]
    assert one.stamps == platform.within(window) and len(one.stamps) == 600
    assert (one.counts.requests, one.counts.continuations, one.counts.splits) == (8, 0, 1)


def test_answers_that_do_not_advance_fail_the_window_after_max_stalls() -> None:
    # A server that answers from its first stamp whatever start is asked, 10 points at most.
    platform = Platform(every_minute(0, 2880), cap=10, ignores_start=True)
    with pytest.raises(StalledError, match=rf"{MAX_STALLS + 1} answers to continue from .* of which 0 new"):
        fetch(platform, raw(0, 60), max_points=1000)

    wider = (at(60) - DAY_MS, at(60), 1000)  # each answer as long as the longest seen is checked first
    assert platform.asked[:3] == [(at(0), at(60), 1000), wider, (at(9), at(60), 1000)]
    # The answer from 00:09 holds the same 10 points, none new: a stall. Each next one asks 1 ms later,
    # and the answer after the MAX_STALLS-th stall fails the window.
    assert platform.asked[3::2] == [wider] * MAX_STALLS
    assert platform.asked[4::2] == [(at(9) + k, at(60), 1000) for k in range(1, MAX_STALLS + 1)]


def test_a_400_on_a_large_count_halves_it_until_accepted_and_the_route_keeps_it() -> None:
    platform = Platform(every_minute(-1440, 2880), max_count=250)
    first, second = raw(0, 60), raw(60, 120)
    (one, two), caps = fetch(platform, first, second, max_points=1000)

    assert one.asked == [(at(0), at(60), 1000), (at(0), at(60), 500), (at(0), at(60), 250)]
    # 61 points, the last on the window's end: the answer is whole without a wider span.
    assert one.stamps == platform.within(first) and len(one.stamps) == 61
    assert one.counts.requests == 3
    assert two.asked == [(at(60), at(120), 250)]
    assert two.stamps == platform.within(second)
    assert caps.count(ParamKind.PHYSICAL, Series.RAW, 1000) == 250
    assert caps.count(ParamKind.PHYSICAL, Series.AVERAGE, 1000) == 1000  # another route asks as before


def test_a_400_that_is_not_about_the_count_fails_the_window_once_the_count_is_small() -> None:
    platform = Platform(every_minute(-1440, 2880), max_count=50)
    with pytest.raises(RequestRejected, match="HTTP 400: count must not exceed the maximum"):
        fetch(platform, raw(0, 60), max_points=1000)
    assert platform.asked == [(at(0), at(60), count) for count in (1000, 500, 250, 125, 100)]
