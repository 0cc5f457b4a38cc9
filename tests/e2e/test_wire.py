"""etl.client.wire against the real emulator: connections reused and bounded, never reused when unusable.
Against scripted peers (framings, failures, timeouts): tests/unit/client/test_wire.py."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import uvloop

from etl.client.wire import WireTransport
from etl_emulator.server import run_emulator
from tests.support.checks import assert_exact
from tests.support.configs import make_config
from tests.support.emulator import emulator_config
from tests.support.expected import SOURCE
from tests.support.network import blackhole, free_port_on_both, loop_resolving
from tests.support.pipeline import run

T = TypeVar("T")


class Counted(WireTransport):
    """Counts the connections the transport opens and the most requests it served at once."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits)
        self.opened = self.busy = self.most_busy = 0

    async def _connect(self, origin, timeout):
        self.opened += 1
        return await super()._connect(origin, timeout)

    async def _exchange(self, *args):
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            return await super()._exchange(*args)
        finally:
            self.busy -= 1

    def idle(self) -> int:
        return sum(len(c) for c in self._idle.values())


def _client(transport: WireTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, timeout=10)


def test_connections_are_reused_and_bounded(emulator):
    transport = Counted(httpx.Limits(max_connections=4, max_keepalive_connections=4))

    async def go() -> list[int]:
        async with _client(transport) as client:
            answers = await asyncio.gather(
                *(client.get(emulator.url + "/_emulator/health") for _ in range(60))
            )
            return [a.status_code for a in answers]

    assert asyncio.run(go()) == [200] * 60
    assert transport.most_busy == 4  # 60 requests at once, 4 at a time
    assert transport.opened <= 4  # every later request reused one of them
    assert transport.busy == 0


def test_a_connection_the_server_closes_is_not_reused(emulator):
    transport = Counted(httpx.Limits(max_connections=1, max_keepalive_connections=1))

    async def go() -> None:
        async with _client(transport) as client:
            closing = await client.get(emulator.url + "/_emulator/health", headers={"Connection": "close"})
            assert closing.status_code == 200
            assert transport.idle() == 0  # closed, not kept
            for _ in range(3):
                assert (await client.get(emulator.url + "/_emulator/health")).status_code == 200

    asyncio.run(go())
    assert transport.opened == 2  # one for the closing answer, one reused by the three after it


def test_an_answer_left_unread_gives_its_slot_back(emulator):
    transport = Counted(httpx.Limits(max_connections=1, max_keepalive_connections=1))

    async def go() -> None:
        async with _client(transport) as client:
            async with client.stream("GET", emulator.url + "/_emulator/health"):
                pass  # closed unread: that connection cannot carry another request
            answer = await asyncio.wait_for(client.get(emulator.url + "/_emulator/health"), 5)
            assert answer.status_code == 200

    asyncio.run(go())
    assert transport.busy == 0


def test_a_run_to_a_host_whose_first_address_drops_packets_is_exact_without_a_retry(tmp_path, monkeypatch):
    """`etl run` on its own event loop (uvloop), to a name the resolver gives a blackholed IPv6 address
    first and the emulator's IPv4 address second: every connection is made on the second address a
    quarter of a second later, none waits out the connect timeout (that would be retried), and the run is
    exact."""
    port = free_port_on_both()
    names = {"platform.test": ["::1", "127.0.0.1"]}
    monkeypatch.setattr(uvloop, "run", lambda work: _run_on(loop_resolving("uvloop", names), work))
    with run_emulator(emulator_config(), port=port) as emulator, blackhole("::1", port):
        base_url = emulator.base_url.replace("127.0.0.1", "platform.test")
        config = make_config(
            base_url, tmp_path, source={"name": SOURCE}, series=["raw"], extract={"concurrency": 4}
        )
        summary = run(config).as_dict()
    assert summary["status"] == "ok" and summary["retries"] == 0, summary
    assert_exact(tmp_path, series=["raw"])


def _run_on(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()
