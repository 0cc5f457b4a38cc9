"""etl.client.pool without a server: a refused connection is httpx's ConnectError, and the transport sends
through etl's own pool. Connections reused and bounded against the emulator: tests/e2e/test_pool.py."""

from __future__ import annotations

import asyncio

import httpcore
import httpx
import pytest

from etl.client.pool import LeanTransport


def _client(transport: LeanTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, timeout=10)


def test_a_refused_connection_is_httpx_s_connect_error():
    async def go() -> None:
        async with _client(LeanTransport()) as client:
            await client.get("http://127.0.0.1:9/")  # the discard port: nothing listens

    with pytest.raises(httpx.ConnectError):
        asyncio.run(go())


def test_the_pool_is_what_the_transport_sends_through():
    transport = LeanTransport()
    assert not isinstance(transport._pool, httpcore.AsyncConnectionPool)
