"""The session's senders (etl/client/session.py): at most `max_in_flight` requests on the wire, the next
one sent as soon as an answer comes, and a cancelled request leaving its sender to the others."""

from __future__ import annotations

import asyncio

import httpx

from etl.client import ClientOptions
from etl.client.concurrency import CapacityFigures
from etl.client.session import Session
from tests.support.turns import settle, until

SIGNED_IN = httpx.Response(
    200,
    json={"id": 1, "login": "demo"},
    headers=[("set-cookie", "SEMSESSIONID=s1; Path=/"), ("set-cookie", "issToken=t1; Path=/")],
)


class Server(httpx.AsyncBaseTransport):
    """Answers `/db/<name>` with `{}` once `release(name)` is called; notes what it was sent, when."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.gates: dict[str, asyncio.Event] = {}
        self.on_wire = self.most_on_wire = 0

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def release(self, *names: str) -> None:
        for name in names:
            self.gate(name).set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/login":
            return SIGNED_IN
        name = request.url.path.rsplit("/", 1)[-1]
        self.log.append(f"sent {name}")
        self.on_wire += 1
        self.most_on_wire = max(self.most_on_wire, self.on_wire)
        try:
            await self.gate(name).wait()
        finally:
            self.on_wire -= 1
        return httpx.Response(200, json={})


def session(server: Server, max_in_flight: int) -> Session:
    return Session(
        "http://server", "demo", "pw", ClientOptions(max_in_flight=max_in_flight), transport=server
    )


async def handled(s: Session, name: str, log: list[str]) -> None:
    await s.call("GET", f"/db/{name}")
    log.append(f"handled {name}")


def test_the_next_request_goes_out_before_an_answer_is_handled():
    async def go() -> list[str]:
        log: list[str] = []
        server = Server(log)
        s = session(server, max_in_flight=1)
        tasks = [asyncio.ensure_future(handled(s, name, log)) for name in ("a", "b")]
        await until(lambda: log == ["sent a"], "a on the wire, b waiting for the sender")
        server.release("a", "b")
        await asyncio.gather(*tasks)
        await s.aclose()
        return log

    # Behind a semaphore, "handled a" came before "sent b": the slot waited for the answer's handling.
    assert asyncio.run(go()) == ["sent a", "sent b", "handled a", "handled b"]


def test_at_most_max_in_flight_requests_are_on_the_wire():
    async def go() -> int:
        log: list[str] = []
        server = Server(log)
        s = session(server, max_in_flight=3)
        tasks = [asyncio.ensure_future(s.call("GET", f"/db/{i}")) for i in range(10)]
        for answered in range(10):
            sent = min(answered + 3, 10)  # every sender has a request on the wire, or none is left to send
            await until(lambda sent=sent: len(log) >= sent, f"{sent} requests sent")
            server.release(log[answered].removeprefix("sent "))  # then the oldest is answered
        await asyncio.gather(*tasks)
        await s.aclose()
        return server.most_on_wire

    assert asyncio.run(go()) == 3


def test_a_cancelled_request_leaves_its_sender_to_the_others():
    async def go() -> list[str]:
        log: list[str] = []
        server = Server(log)
        s = session(server, max_in_flight=1)
        stuck = asyncio.ensure_future(handled(s, "stuck", log))  # on the wire, never answered
        queued = asyncio.ensure_future(handled(s, "queued", log))  # waits for the only sender
        await until(lambda: log == ["sent stuck"], "the stuck request on the wire")
        queued.cancel()
        stuck.cancel()
        server.release("after")
        await asyncio.wait_for(handled(s, "after", log), 5)
        await s.aclose()
        return log

    # The queued request is never sent; the stuck one's exchange is cancelled, and its sender goes on.
    assert asyncio.run(go()) == ["sent stuck", "sent after", "handled after"]


def test_a_request_cancelled_after_its_answer_came_leaves_no_sender_stuck():
    async def go() -> list[str]:
        log: list[str] = []
        server = Server(log)
        s = session(server, max_in_flight=1)
        first = asyncio.ensure_future(handled(s, "first", log))
        await until(lambda: log == ["sent first"], "the first request on the wire")
        server.release("first", "next")
        first.cancel()  # its answer is set (or about to be) before the task resumes: asyncio cancels it
        nxt = asyncio.ensure_future(handled(s, "next", log))
        await asyncio.wait_for(nxt, 5)
        await s.aclose()
        return log

    log = asyncio.run(go())
    assert log[-2:] == ["sent next", "handled next"]


class Settable:
    """A limit the test moves by hand."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.figures = CapacityFigures()

    @property
    def current(self) -> int:
        return self.n

    def succeeded(self, sent: float, seconds: float, in_flight: int) -> None:
        pass

    def dropped(self, sent: float, seconds: float, refused: bool) -> None:
        pass


def test_the_senders_follow_a_limit_that_moves():
    async def go() -> list[int]:
        server = Server([])
        s = session(server, max_in_flight=1)
        s.limit = limit = Settable(2)
        tasks = [asyncio.ensure_future(s.call("GET", f"/db/{i}")) for i in range(12)]
        await settle()
        seen = [server.on_wire]
        limit.n = 5  # grows: the next answer's sender starts the others
        server.release("0")
        await settle()
        seen.append(server.on_wire)
        limit.n = 1  # falls: senders over it end after their exchange
        server.release("1", "2", "3", "4", "5")
        await settle()
        seen.append(server.on_wire)
        server.release(*(str(i) for i in range(12)))
        await asyncio.gather(*tasks)
        await s.aclose()
        return seen

    assert asyncio.run(go()) == [2, 5, 1]
