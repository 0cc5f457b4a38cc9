"""etl.client.wire against scripted peers on loopback (in process, milliseconds each): every framing an
HTTP/1.1 answer may come in, and every way it may go wrong. Against the emulator: tests/e2e/test_wire.py."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Awaitable, Callable

import httpx
import pytest

from etl.client.answer_size import BoundedTransport
from etl.client.wire import WireTransport
from etl.errors import AnswerTooLarge, InvalidResponse
from tests.support.network import LOOPS, blackhole, free_port_on_both, loop_resolving

Peer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def exchange(
    peer: Peer, requests: int = 1, make: Callable[..., httpx.AsyncBaseTransport] = WireTransport, **transport
) -> tuple[list[httpx.Response | BaseException], int]:
    """`requests` GETs in turn through one transport (`make(**transport)`, a WireTransport by default) to
    `peer`; the answers (or errors) and how many connections the peer saw."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await peer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def go() -> list[httpx.Response | BaseException]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        out: list[httpx.Response | BaseException] = []
        async with server, httpx.AsyncClient(transport=make(**transport), timeout=2) as client:
            for _ in range(requests):
                try:
                    out.append(await client.get(f"http://127.0.0.1:{port}/x?count=5"))
                except Exception as exc:
                    out.append(exc)
        return out

    return asyncio.run(go()), connections


def answering(*answers: bytes, then_close: bool = False) -> Peer:
    """Each request on any connection gets the next answer (the last one once they run out); with
    `then_close`, a connection is closed after each answer."""
    script = list(answers)

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _head(reader)
            writer.write(script.pop(0) if len(script) > 1 else script[0])
            await writer.drain()
            if then_close:
                return

    return peer


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def test_a_request_goes_out_as_http_1_1_with_its_path_query_and_headers():
    seen: list[bytes] = []

    async def peer(reader, writer):
        seen.append(await _head(reader))
        writer.write(OK)
        await reader.read()

    (answer,), _ = exchange(peer)
    assert isinstance(answer, httpx.Response) and answer.content == b"hello"
    assert seen[0].startswith(b"GET /x?count=5 HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in seen[0]


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: "
        + str(len(gzip.compress(b"hello"))).encode()
        + b"\r\n\r\n"
        + gzip.compress(b"hello"),
    ],
    ids=["chunked", "after-100-continue", "gzip"],
)
def test_every_framing_gives_the_body_and_keeps_the_connection(answer):
    answers, connections = exchange(answering(answer), requests=3)
    assert [a.content for a in answers] == [b"hello"] * 3  # type: ignore[union-attr]
    assert connections == 1


def test_a_body_that_ends_with_the_connection_is_whole_and_the_connection_not_kept():
    answer = b"HTTP/1.0 200 OK\r\n\r\nhello"
    answers, connections = exchange(answering(answer, then_close=True), requests=2)
    assert [a.content for a in answers] == [b"hello"] * 2  # type: ignore[union-attr]
    assert connections == 2


def test_a_connection_the_server_asks_to_close_is_not_kept():
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello"
    answers, connections = exchange(answering(answer), requests=2)
    assert [a.content for a in answers] == [b"hello"] * 2  # type: ignore[union-attr]
    assert connections == 2


def test_a_kept_connection_the_server_closed_is_replaced_without_an_error():
    """The server answers one request per connection without saying so: the second request finds its
    kept connection closed before a byte of answer, and is sent again on a new one."""
    answers, connections = exchange(answering(OK, then_close=True), requests=3)
    assert [a.content for a in answers] == [b"hello"] * 3  # type: ignore[union-attr]
    assert connections == 3


def test_a_connection_dropped_mid_answer_is_an_error_not_a_short_body():
    (error,), _ = exchange(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nhello", then_close=True))
    assert isinstance(error, httpx.RemoteProtocolError)


def test_a_malformed_answer_is_a_protocol_error():
    (error,), _ = exchange(answering(b"HTTP/1.1 abc nonsense\r\n\r\n", then_close=True))
    assert isinstance(error, httpx.RemoteProtocolError)


def test_a_silent_server_is_a_read_timeout():
    async def peer(reader, writer):
        await _head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe")  # then nothing
        await reader.read()

    async def go():
        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, httpx.AsyncClient(transport=WireTransport(), timeout=0.2) as client:
            await client.get(f"http://127.0.0.1:{port}/")

    with pytest.raises(httpx.ReadTimeout):
        asyncio.run(go())


def test_answers_over_the_limit_or_corrupt_fail_and_their_connection_goes():
    big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"x" * 1024 + b"\r\n"
    answers, connections = exchange(answering(big, OK), requests=2, max_answer_bytes=1000)
    assert isinstance(answers[0], AnswerTooLarge)
    assert answers[1].content == b"hello"  # type: ignore[union-attr]
    assert connections == 2
    corrupt = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n\r\nnotgz"
    (error,), _ = exchange(answering(corrupt))
    assert isinstance(error, InvalidResponse)


def test_a_refused_connection_is_httpx_s_connect_error():
    async def go() -> None:
        async with httpx.AsyncClient(transport=WireTransport(), timeout=10) as client:
            await client.get("http://127.0.0.1:9/")  # the discard port: nothing listens

    with pytest.raises(httpx.ConnectError):
        asyncio.run(go())


def test_a_failed_answer_lets_go_of_its_body_at_once():
    """What a failed answer read so far is freed as it fails, not when the error that it failed with is
    (a failed window keeps its error for the run's summary) nor when the cyclic GC comes by."""
    import gc
    import tracemalloc
    import zlib

    bomb = zlib.compress(b" " * 64 * 1024**2, 9)  # 64 MiB of spaces in about 64 kB
    answer = b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n" % len(bomb) + bomb
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        (error,), _ = exchange(answering(answer), max_answer_bytes=8 * 1024**2)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert isinstance(error, AnswerTooLarge)
    assert held < 2 * 1024**2, held  # the 8 MiB decompressed before the limit are gone


def httpx_own(max_answer_bytes: int = 32 * 1024**2) -> httpx.AsyncBaseTransport:
    """httpx's own transport under etl's answer limit, as `source.transport: httpx` has it."""
    return BoundedTransport(httpx.AsyncHTTPTransport(), max_answer_bytes)


@pytest.mark.parametrize("make", [WireTransport, httpx_own], ids=["etl", "httpx"])
def test_headers_over_the_cap_are_refused_after_reading_no_more_than_it(make):
    """200 KiB of headers, or one header that never ends: refused once the head passes 100 KiB (httpx's
    cap), as too large an answer, by either transport."""
    many = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"v" * 1000) for i in range(200))
    (error,), _ = exchange(answering(many + b"Content-Length: 5\r\n\r\nhello"), make=make)
    assert isinstance(error, AnswerTooLarge) and str(error) == "answer headers over 100 KiB"

    read = 0

    async def endless(reader, writer):
        nonlocal read
        await _head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Long: ")
        while True:  # until the client goes away
            writer.write(b"v" * 65536)
            await writer.drain()
            read += 65536

    (error,), _ = exchange(endless, make=make)
    assert isinstance(error, AnswerTooLarge) and str(error) == "answer headers over 100 KiB"
    assert read < 8 * 1024**2  # the client stopped reading (what the sockets buffer is in flight)


@pytest.mark.parametrize("make", [WireTransport, httpx_own], ids=["etl", "httpx"])
def test_header_bytes_count_against_the_answer_limit(make):
    head = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"v" * 600 + b"\r\nContent-Length: %d\r\n\r\n"
    (fits,), _ = exchange(answering(head % 300 + b"x" * 300), make=make, max_answer_bytes=1000)
    assert isinstance(fits, httpx.Response) and fits.content == b"x" * 300
    over = head.replace(b"Content-Length: %d", b"Transfer-Encoding: chunked") + b"1f4\r\n" + b"x" * 500
    (error,), _ = exchange(answering(over + b"\r\n0\r\n\r\n"), make=make, max_answer_bytes=1000)
    assert isinstance(error, AnswerTooLarge) and "on the wire" in str(error)
    (error,), _ = exchange(answering(head % 300 + b"x" * 300), make=make, max_answer_bytes=500)
    assert isinstance(error, AnswerTooLarge) and "in its headers" in str(error)


# -- connecting: every address of a name, raced (etl/client/connect.py) ------------------------------


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_an_address_that_drops_packets_gives_way_to_the_next_one(kind):
    """A name whose first address never answers (a broken IPv6 route): its next address is tried a
    quarter of a second later, on either event loop, and the request is answered well within a connect
    timeout that the first address alone would have used up."""
    port = free_port_on_both()

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await answering(OK)(reader, writer)
        writer.close()

    async def go() -> httpx.Response:
        server = await asyncio.start_server(peer, "127.0.0.1", port)
        async with server, httpx.AsyncClient(transport=WireTransport(), timeout=30) as client:
            return await client.get(f"http://platform.test:{port}/x")

    loop = loop_resolving(kind, {"platform.test": ["::1", "127.0.0.1"]})
    with blackhole("::1", port):
        try:
            answer = loop.run_until_complete(asyncio.wait_for(go(), 10))  # a guard only: 30 s would fail it
        finally:
            loop.close()
    assert answer.content == b"hello"


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_every_address_refusing_is_one_connect_error_naming_each(kind):
    port = free_port_on_both()

    async def go() -> None:
        async with httpx.AsyncClient(transport=WireTransport(), timeout=5) as client:
            await client.get(f"http://platform.test:{port}/x")

    loop = loop_resolving(kind, {"platform.test": ["::1", "127.0.0.1"]})
    try:
        with pytest.raises(httpx.ConnectError) as raised:
            loop.run_until_complete(go())
    finally:
        loop.close()
    assert "::1" in str(raised.value) and "127.0.0.1" in str(raised.value)
