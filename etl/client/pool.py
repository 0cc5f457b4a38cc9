"""Keep-alive connections handed out one request at a time.

httpcore's general pool re-examines every connection it holds whenever a request starts or an answer
is closed: expiry, a readability poll through anyio's attribute lookup, and an idle count that is
itself a pass over the pool. With 16 connections and quick answers that was about half of the CPU a
request cost (`python benchmarks/fleet.py`). Here a request takes the most recently used idle
connection, checks that one alone, and gives it back when its answer is closed. `LeanTransport` is
httpx's own transport (TLS settings, exception mapping, response streams) over this pool.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpcore
import httpx


class _Connections:
    """What `httpx.AsyncHTTPTransport` needs of its httpcore pool: `handle_async_request` and `aclose`."""

    def __init__(self, tls: Callable[[], ssl.SSLContext], limits: httpx.Limits) -> None:
        self._tls = tls
        self._ssl_context: ssl.SSLContext | None = None
        self.keepalive = limits.max_keepalive_connections or 0
        self.keepalive_expiry = limits.keepalive_expiry
        self.slots = asyncio.Semaphore(limits.max_connections or 1 << 30)
        self.idle: list[httpcore.AsyncHTTPConnection] = []  # the most recently used last
        self.backend = httpcore.AnyIOBackend()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        await self.slots.acquire()
        connection = None
        try:
            connection = await self._take(request.url.origin)
            response = await connection.handle_async_request(request)
        except BaseException:
            self.slots.release()
            if connection is not None:
                await connection.aclose()
            raise
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_Body(response.stream, connection, self),
            extensions=response.extensions,
        )

    async def _take(self, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        while self.idle:
            connection = self.idle.pop()
            # Idle and readable means the server closed it: only that connection is polled.
            if (
                connection.can_handle_request(origin)
                and connection.is_idle()
                and not connection.has_expired()
            ):
                return connection
            await connection.aclose()
        return httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self.ssl_context() if origin.scheme == b"https" else None,
            keepalive_expiry=self.keepalive_expiry,
            network_backend=self.backend,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """Made at the first https connection: loading the CA bundle costs a plain-http run 0.05 CPU-s."""
        if self._ssl_context is None:
            self._ssl_context = self._tls()
        return self._ssl_context

    async def give_back(self, connection: httpcore.AsyncHTTPConnection) -> None:
        self.slots.release()
        if connection.is_idle() and len(self.idle) < self.keepalive:
            self.idle.append(connection)
        else:  # an answer left unread, or a connection the server asked to close
            await connection.aclose()

    async def aclose(self) -> None:
        idle, self.idle = self.idle, []
        for connection in idle:
            await connection.aclose()

    async def __aenter__(self) -> _Connections:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Body:
    """An answer's body stream; closing it gives its connection back, once."""

    def __init__(self, stream: Any, connection: httpcore.AsyncHTTPConnection, pool: _Connections) -> None:
        # httpcore's async response stream: async iterable, with aclose()
        self.connection: httpcore.AsyncHTTPConnection | None
        self.stream, self.connection, self.pool = stream, connection, pool

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self.stream:
            yield part

    async def aclose(self) -> None:
        connection, self.connection = self.connection, None
        if connection is None:
            return
        try:
            await self.stream.aclose()
        finally:
            await self.pool.give_back(connection)


class LeanTransport(httpx.AsyncHTTPTransport):
    """httpx's default transport over `_Connections` instead of httpcore's pool."""

    def __init__(self, verify: bool | ssl.SSLContext = True, limits: httpx.Limits | None = None) -> None:
        # httpx's __init__ would only build its own pool (and an SSL context): all the transport's
        # methods need is `_pool`.
        limits = limits or httpx.Limits()

        def tls() -> ssl.SSLContext:
            # The SSL context httpx builds from `verify`, taken from the pool it makes (not used otherwise).
            context = httpx.AsyncHTTPTransport(verify=verify)._pool._ssl_context
            return context if context is not None else ssl.create_default_context()

        self._pool = _Connections(tls, limits)  # type: ignore[assignment]
