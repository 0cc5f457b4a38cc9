"""Discovery asks the search's trust check and its first pages at once (etl/pipeline/discover.py): four
round trips before the first series request; a search that cannot be trusted still falls back to the
lists, its speculative pages dropped. A fleet whose lists fit in one round is listed: three round trips."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from etl.client import MonitoringClient
from etl.client.wire import WireTransport
from etl.config import SelectConfig
from etl.pipeline.discover import discover
from etl_emulator.server import run_emulator
from tests.support.emulator import emulator_config


@pytest.fixture(scope="module")
def nine_objects():
    """More objects than one round of lists holds (2 lists x 9 objects > 16 in flight)."""
    with run_emulator(emulator_config(objects=9)) as running:
        yield running


class _Rounds(httpx.AsyncBaseTransport):
    """Counts the requests that start while none is in flight (each begins a round trip), and can strip
    `objectId` from the search's records (a search that cannot be trusted) or ask every search page at
    offset 0 (a server that ignores `offset`). Answers come together, as from a server with latency: each
    is held until every request in flight with it has its answer."""

    def __init__(self, untrusted: bool, ignore_offset: bool = False) -> None:
        self.inner, self.untrusted, self.ignore_offset = WireTransport(), untrusted, ignore_offset
        self.in_flight = self.rounds = self.unanswered = 0
        self.together = asyncio.Event()  # set: the answers of the requests in flight together are let go
        self.together.set()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self.in_flight:
            self.rounds += 1
        self.in_flight += 1
        if self.together.is_set():  # those in flight before were let go: this one starts a new group
            self.together = asyncio.Event()
        together = self.together
        self.unanswered += 1
        self.paths.append(request.url.path)
        if self.ignore_offset and request.url.path.endswith("/search/params"):
            request.url = request.url.copy_set_param("offset", "0")
        try:
            try:
                response = await self.inner.handle_async_request(request)
                body = await response.aread()
            finally:
                self.unanswered -= 1
                if not self.unanswered:
                    together.set()
            await together.wait()
        finally:
            self.in_flight -= 1
        if self.untrusted and request.url.path.endswith("/search/params"):
            body = orjson.dumps([{k: v for k, v in r.items() if k != "objectId"} for r in orjson.loads(body)])
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _discover(emulator, untrusted: bool, ignore_offset: bool = False) -> tuple[list[int], _Rounds]:
    transport = _Rounds(untrusted, ignore_offset)

    async def go():
        async with MonitoringClient(emulator.base_url, "demo", "demo", transport=transport) as client:
            await client.sign_in()
            return await discover(client, SelectConfig())

    found = asyncio.run(go())
    found.objects.close()
    found.parameters.close()
    return found.params.id.tolist(), transport


def test_the_search_and_its_check_share_round_trips(nine_objects):
    ids, transport = _discover(nine_objects, untrusted=False)
    assert len(ids) == 36  # 9 objects x (3 physical + 1 calculated)
    assert sum(p.endswith("/db/contrcalcparam") for p in transport.paths) == 1  # the check's sample
    # sign-in, objects, [check + first page], the empty page that ends the listing
    assert transport.rounds == 4, transport.paths


def test_an_untrusted_search_falls_back_to_the_lists(nine_objects):
    trusted, _ = _discover(nine_objects, untrusted=False)
    ids, transport = _discover(nine_objects, untrusted=True)
    assert ids == trusted
    assert sum(p.endswith("/db/contrdeviceparam") for p in transport.paths) == 9 + 1  # each object + check


def test_a_few_objects_are_listed_in_one_round_trip(emulator):
    ids, transport = _discover(emulator, untrusted=False)
    assert len(ids) == 8  # 2 objects x (3 physical + 1 calculated)
    assert not any(p.endswith("/search/params") for p in transport.paths)
    assert sum(p.endswith(("/db/contrdeviceparam", "/db/contrcalcparam")) for p in transport.paths) == 4
    assert transport.rounds == 3, transport.paths  # sign-in, objects, the lists


@pytest.mark.parametrize("envelope", ["items", "spring", "data"])
def test_the_search_is_read_in_any_envelope(nine_objects, envelope):
    """`{"total": N, "items": [...]}`, Spring's Page, `{"data": [...]}`: the same parameters, through the
    search's pages (not two lists per object)."""
    trusted, _ = _discover(nine_objects, untrusted=False)
    nine_objects.set_faults(search_envelope=envelope)
    try:
        ids, transport = _discover(nine_objects, untrusted=False)
    finally:
        nine_objects.set_faults(reset=True)
    assert ids == trusted and len(ids) == 36
    # the check's sample object, its search, the first page, the empty page that ends the listing
    assert sum(p.endswith("/search/params") for p in transport.paths) == 3, transport.paths
    assert sum(p.endswith(("/db/contrdeviceparam", "/db/contrcalcparam")) for p in transport.paths) == 2
    assert transport.rounds == 4, transport.paths


def test_a_search_that_ignores_offset_falls_back_to_the_lists(nine_objects):
    """Its pages would never end: the next offset answering the same page lists the objects one by one."""
    trusted, _ = _discover(nine_objects, untrusted=False)
    ids, transport = _discover(nine_objects, untrusted=False, ignore_offset=True)
    assert ids == trusted
    assert sum(p.endswith("/search/params") for p in transport.paths) == 3  # check, first page, its repeat
    assert sum(p.endswith("/db/contrdeviceparam") for p in transport.paths) == 9 + 1  # each object + check
