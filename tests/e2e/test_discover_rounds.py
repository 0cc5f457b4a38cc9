"""Discovery asks the search's trust check and its first pages at once (etl/pipeline/discover.py): four
round trips before the first series request; a search that cannot be trusted still falls back to the
lists, its speculative pages dropped."""

from __future__ import annotations

import asyncio

import httpx
import orjson

from etl.client import MonitoringClient
from etl.client.wire import WireTransport
from etl.config import SelectConfig
from etl.pipeline.discover import discover


class _Rounds(httpx.AsyncBaseTransport):
    """Counts the requests that start while none is in flight (each begins a round trip), and can strip
    `objectId` from the search's records (a search that cannot be trusted)."""

    def __init__(self, untrusted: bool) -> None:
        self.inner, self.untrusted = WireTransport(), untrusted
        self.in_flight = self.rounds = 0
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self.in_flight:
            self.rounds += 1
        self.in_flight += 1
        self.paths.append(request.url.path)
        try:
            response = await self.inner.handle_async_request(request)
            body = await response.aread()
            await asyncio.sleep(0.02)  # answers arrive together, as from a server with latency
        finally:
            self.in_flight -= 1
        if self.untrusted and request.url.path.endswith("/search/params"):
            body = orjson.dumps([{k: v for k, v in r.items() if k != "objectId"} for r in orjson.loads(body)])
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _discover(emulator, untrusted: bool) -> tuple[list[int], _Rounds]:
    transport = _Rounds(untrusted)

    async def go():
        async with MonitoringClient(emulator.base_url, "demo", "demo", transport=transport) as client:
            await client.sign_in()
            return await discover(client, SelectConfig())

    found = asyncio.run(go())
    found.objects.close()
    found.parameters.close()
    return found.params.id.tolist(), transport


def test_the_search_and_its_check_share_round_trips(emulator):
    ids, transport = _discover(emulator, untrusted=False)
    assert len(ids) == 8  # 2 objects x (3 physical + 1 calculated)
    # sign-in, objects, [check + first page], the empty page that ends the listing
    assert transport.rounds == 4, transport.paths


def test_an_untrusted_search_falls_back_to_the_lists(emulator):
    trusted, _ = _discover(emulator, untrusted=False)
    ids, transport = _discover(emulator, untrusted=True)
    assert ids == trusted
    assert sum(p.endswith("/db/contrdeviceparam") for p in transport.paths) == 2 + 1  # each object + check
