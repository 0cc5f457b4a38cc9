"""HTTP/1.1 for etl's requests: keep-alive connections over asyncio protocols, answers parsed by httptools.

httpx's own transport sends through httpcore: a connection is an anyio stream read a chunk at a time by
coroutines, and parsed by h11 in Python, with locks and cancel scopes at every step: on the success path
most of an answer's cost to the client (`python benchmarks/client_cpu.py` measures it; docs/performance.md
has the figures). Here a connection is an `asyncio.Protocol`: the loop hands it the
bytes as they come, httptools' C parser calls back once per header and body piece, and the request's
coroutine wakes once, when its answer is complete. The head is fed to the parser no further than its cap
and the body is counted and decompressed as it arrives, both within the answer limit
(etl/client/answer_size.py); a failed answer lets go of what it read at once.

`WireTransport` is an `httpx.AsyncBaseTransport`, so httpx's client stays on top: the auth flow, event
hooks, exceptions. It carries the direct requests only: a proxied one goes to httpx's proxy transport,
mounted beside it (etl/client/routes.py). It speaks HTTP/1.1 over TCP or TLS to the origin, nothing
else: no HTTP/2, no proxy, no upgrade. A connection is made to the first of the host's addresses that
answers (etl/client/connect.py). Connections: the most recently used idle one is taken (the least
likely to have been closed by the server), one that has been idle past the keep-alive expiry is closed
instead, and one whose answer said so (`Connection: close`, HTTP/1.0) is not kept. A request sent on a
kept connection that the server had closed meanwhile (it dropped without a byte of answer) is sent once
more on a new one, as a browser does. Timeouts are httpx's: `connect` for the connection and TLS
handshake, `read` between two pieces of an answer; the whole exchange is bounded by the caller
(etl/client/session.py).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import cast

import httptools
import httpx

from etl.client.answer_size import AnswerBody, answer_encoding, decoded_headers, head_limit, head_too_large
from etl.client.connect import open_socket
from etl.errors import EtlError, without_frames

log = logging.getLogger(__name__)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HTTP11 = {"http_version": b"HTTP/1.1"}
_DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's own
_UNBOUNDED = 1 << 30


class _Stale(Exception):
    """A kept connection closed before the answer began: the request may be sent again."""


class _Exchange:
    """One request's answer as it arrives on a connection."""

    __slots__ = (
        "body",
        "done",
        "encoding",
        "error",
        "head",
        "head_left",
        "head_only",
        "headers",
        "keep_alive",
        "last",
        "max_bytes",
        "status",
        "until_eof",
    )

    def __init__(self, done: asyncio.Future[None], max_bytes: int, now: float, head_only: bool) -> None:
        self.done = done
        self.max_bytes = max_bytes
        self.head_only = head_only  # an answer to HEAD: headers only, whatever its length says
        self.encoding: str | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head = 0  # bytes of the headers, counted against max_bytes with the body
        self.head_left = head_limit(max_bytes)  # bytes the head may still take (fed while body is None)
        self.body: AnswerBody | None = None
        self.keep_alive = False
        self.until_eof = False  # neither a length nor chunks: the body ends with the connection
        self.error: BaseException | None = None
        self.last = now  # when bytes last arrived

    def fail(self, error: BaseException) -> None:
        # The body read so far goes at once: the exchange lives on in the frames of its error's traceback.
        self.body = None
        if not self.done.done():
            self.error = error
            self.done.set_result(None)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; `exchange` is the answer it is waiting for, if any."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.failure: BaseException | None = None  # raised by a callback, for data_received to report
        self.answers = 0  # answers read whole: a connection that served one is a kept one
        self.idle_since = 0.0

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport's subclasses

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None or exchange.done.done():  # bytes nobody asked for: the stream is lost
            self.close()
            return
        exchange.last = self.loop.time()
        try:
            if exchange.body is None:  # the head: fed no further than its cap, within which it must end
                if len(data) > exchange.head_left:
                    fits, data = data[: exchange.head_left], data[exchange.head_left :]
                    self.parser.feed_data(fits)
                    if exchange.body is None and not exchange.done.done():
                        exchange.fail(head_too_large(exchange.max_bytes))
                        self.close()
                        return
                exchange.head_left -= len(data)
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # A callback's own error (over the answer limit, a corrupt compressed body) comes wrapped;
            # etl's own errors without the frames they were raised in, which hold the answer's pieces.
            failure, self.failure = self.failure, None
            if isinstance(failure, EtlError):
                failure = without_frames(failure)
            exchange.fail(failure or httpx.RemoteProtocolError(f"malformed answer: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close: a half-closed HTTP/1.1 connection carries nothing more

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is None or exchange.done.done():
            return
        if exchange.until_eof and exchange.body is not None:
            self._complete(exchange)
        elif not exchange.status and not exchange.headers and self.answers:
            exchange.fail(_Stale())
        else:
            exchange.fail(
                httpx.RemoteProtocolError("the server closed the connection before the answer ended")
            )

    # -- httptools callbacks --------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.exchange is not None
        self.exchange.headers.append((name, value))
        self.exchange.head += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # informational (100 Continue): the answer comes after it
            exchange.headers = []
            return
        exchange.status = status
        headers = httpx.Headers(exchange.headers)
        if exchange.head_only:  # httptools cannot be told that no body follows: done, and not kept
            exchange.body = AnswerBody(None, exchange.max_bytes, exchange.head)
            self._complete(exchange)
            return
        exchange.keep_alive = self.parser.should_keep_alive()
        exchange.until_eof = "content-length" not in headers and "transfer-encoding" not in headers
        try:
            exchange.encoding = answer_encoding(headers, exchange.max_bytes)
        except BaseException as exc:
            self.failure = exc
            raise
        exchange.body = AnswerBody(exchange.encoding, exchange.max_bytes, exchange.head)

    def on_body(self, body: bytes) -> None:
        assert self.exchange is not None and self.exchange.body is not None
        try:
            self.exchange.body.feed(body)
        except BaseException as exc:
            self.failure = exc
            raise

    def on_message_complete(self) -> None:
        exchange = self.exchange
        if exchange is not None and exchange.body is not None:  # not the end of a 1xx
            self._complete(exchange)

    # -- the connection's owner -------------------------------------------------------------------

    def _complete(self, exchange: _Exchange) -> None:
        self.answers += 1
        if not exchange.done.done():
            exchange.done.set_result(None)

    def send(self, data: bytes, max_bytes: int, head_only: bool) -> _Exchange:
        assert self.transport is not None
        exchange = _Exchange(self.loop.create_future(), max_bytes, self.loop.time(), head_only)
        self.exchange = exchange
        self.transport.write(data)
        return exchange

    def reusable(self) -> bool:
        exchange = self.exchange
        return (
            not self.closed
            and exchange is not None
            and exchange.error is None
            and exchange.keep_alive
            and not exchange.until_eof
        )

    def why_not_kept(self) -> str:
        exchange = self.exchange
        if self.closed or exchange is None:
            return "closed"
        if not exchange.keep_alive:
            return "the answer asked to close it"
        return "the body ended with the connection" if exchange.until_eof else "enough are kept"

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class WireTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over `_Connection`s: at most `limits.max_connections` at once, up to
    `limits.max_keepalive_connections` kept idle for `limits.keepalive_expiry` seconds. Answers come with
    their bodies read and decoded, within `max_answer_bytes`."""

    def __init__(
        self,
        verify: bool | ssl.SSLContext = True,
        limits: httpx.Limits | None = None,
        max_answer_bytes: int = 32 * 1024**2,
    ) -> None:
        limits = limits or _DEFAULT_LIMITS
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        # httpx's None: no bound
        self._slots = asyncio.Semaphore(
            _UNBOUNDED if limits.max_connections is None else limits.max_connections
        )
        self._keep = (
            _UNBOUNDED if limits.max_keepalive_connections is None else limits.max_keepalive_connections
        )
        self._expiry = float("inf") if limits.keepalive_expiry is None else limits.keepalive_expiry
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._max_bytes = max_answer_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme, 80))
        timeout = request.extensions.get("timeout", {})
        message = self._message(request, await request.aread())
        await self._slots.acquire()
        try:
            connection = self._take(origin)
            for _ in range(2):
                if connection is None:
                    connection = await self._connect(origin, timeout.get("connect"))
                try:
                    exchange = await self._exchange(
                        connection, message, timeout.get("read"), request.method == "HEAD"
                    )
                except _Stale:  # a kept connection the server had closed: once more on a new one
                    log.debug("%s:%s closed a kept connection; sending again on a new one", *origin[1:])
                    connection = None
                    continue
                break
            else:
                raise httpx.RemoteProtocolError("the server closed the connection before answering")
            assert exchange.body is not None
            try:
                content = exchange.body.result()
            except BaseException:  # the end of a compressed body over the limit, or corrupt
                connection.close()
                raise
            headers = decoded_headers(exchange.headers, exchange.encoding)
            self._give_back(origin, connection)
        finally:
            self._slots.release()
        return httpx.Response(
            exchange.status, headers=headers, content=content, extensions=_HTTP11, request=request
        )

    @staticmethod
    def _message(request: httpx.Request, body: bytes) -> bytes:
        lines = [request.method.encode(), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            lines += (name, b": ", value, b"\r\n")
        lines.append(b"\r\n")
        return b"".join(lines) + body

    async def _exchange(
        self, connection: _Connection, message: bytes, read: float | None, head_only: bool
    ) -> _Exchange:
        exchange = connection.send(message, self._max_bytes, head_only)
        timer = (
            None if read is None else connection.loop.call_later(read, self._read_timeout, connection, read)
        )
        try:
            await exchange.done
        except BaseException:  # cancelled (the caller's deadline, a stop): the answer is abandoned
            connection.close()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if exchange.error is not None:
            connection.close()
            raise exchange.error
        return exchange

    def _read_timeout(self, connection: _Connection, read: float) -> None:
        exchange = connection.exchange
        if exchange is None or exchange.done.done():
            return
        quiet = connection.loop.time() - exchange.last
        if quiet < read:  # bytes came since: wait out the rest of a quiet spell
            connection.loop.call_later(read - quiet, self._read_timeout, connection, read)
            return
        exchange.fail(httpx.ReadTimeout(f"no answer bytes for {read:g}s"))
        connection.close()

    def _take(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.loop.time() - connection.idle_since < self._expiry:
                return connection
            connection.close()
        return None

    def _give_back(self, origin: tuple[str, str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if connection.reusable() and len(idle) < self._keep:
            connection.exchange = None
            connection.idle_since = connection.loop.time()
            idle.append(connection)
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s:%s: connection not kept (%s)", *origin[1:], connection.why_not_kept())
        connection.close()

    async def _connect(self, origin: tuple[str, str, int], timeout: float | None) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        factory: Callable[[], _Connection] = lambda: _Connection(loop)  # noqa: E731
        try:
            async with asyncio.timeout(timeout):
                sock = await open_socket(loop, host, port)
                try:
                    _, connection = await loop.create_connection(
                        factory, sock=sock, ssl=tls, server_hostname=host if tls else None
                    )
                except BaseException:  # a failed TLS handshake, the timeout
                    sock.close()
                    raise
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} within {timeout:g}s") from None
        except OSError as exc:  # refused, unreachable, a name that does not resolve, a TLS handshake
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        log.debug("connected to %s:%s%s", host, port, " (TLS)" if tls else "")
        return connection

    def _tls(self) -> ssl.SSLContext:
        """Made at the first https connection: a plain-http run never pays for loading the CA bundle."""
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context(verify=self._verify)
        return self._ssl

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()
