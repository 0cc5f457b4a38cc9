"""Answers read within a size limit, decompressed as they come.

httpx decompresses a gzip body whole before anyone sees it, so a 1 MB body that expands to 1 GiB
(a gzip bomb) would be 1 GiB in memory, and a body that never ends would grow for ever. Here the
transport hands httpx an answer whose body is already decoded, piece by piece as it arrived
(`AnswerBody`), and stops with `AnswerTooLarge` once more than `max_bytes` arrived on the wire or came
out of the decoder. An answer then holds at most `max_bytes` (twice, while its pieces are joined) per
request in flight.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import httpx

from etl.errors import AnswerTooLarge, InvalidResponse

ACCEPT_ENCODING = "gzip, deflate"  # the encodings decoded here (httpx would also offer br and zstd)
PIECE = 256 * 1024  # bytes decompressed at a time
# An answer's status line and headers, at most (httpx's cap: the buffer httpcore gives h11); they count
# against the answer limit as well.
MAX_HEAD = 100 * 1024


def _too_large(max_bytes: int, where: str) -> AnswerTooLarge:
    return AnswerTooLarge(f"answer over {max_bytes / 1024**2:g} MiB (source.max_answer_mb) {where}")


def head_limit(max_bytes: int) -> int:
    """The bytes an answer's head may take within an answer limit of `max_bytes`."""
    return min(MAX_HEAD, max_bytes)


def head_too_large(max_bytes: int) -> AnswerTooLarge:
    if max_bytes < MAX_HEAD:
        return _too_large(max_bytes, "in its headers")
    return AnswerTooLarge(f"answer headers over {MAX_HEAD // 1024} KiB")


class _Inflate:
    """gzip or deflate, decoded a bounded piece at a time."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # deflate is zlib-wrapped as the RFC says, or raw as some servers send it: decided on the first bytes
        self._inflate = zlib.decompressobj(31 if encoding == "gzip" else 15)
        self._started = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        try:
            while data:
                try:
                    piece = self._inflate.decompress(data, PIECE)
                except zlib.error:
                    if self.encoding != "deflate" or self._started:
                        raise
                    self._inflate = zlib.decompressobj(-15)
                    piece = self._inflate.decompress(data, PIECE)
                self._started = True
                data = self._inflate.unconsumed_tail
                if piece:
                    yield piece
        except zlib.error as exc:
            raise InvalidResponse(f"corrupt {self.encoding} body ({exc})") from None

    def flush(self) -> bytes:
        try:
            rest = self._inflate.flush()
        except zlib.error as exc:
            raise InvalidResponse(f"corrupt {self.encoding} body ({exc})") from None
        if self.encoding == "gzip" and not self._inflate.eof:
            raise InvalidResponse("gzip body ended early")
        return rest


def answer_encoding(headers: httpx.Headers | dict[str, str], max_bytes: int) -> str | None:
    """The answer's content coding to undo (gzip, deflate or none), refusing what was not asked for and a
    Content-Length over `max_bytes` before any of the body is read."""
    encodings = [
        e.strip().lower()
        for e in headers.get("content-encoding", "").split(",")
        if e.strip().lower() not in ("", "identity")
    ]
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "deflate")):
        raise InvalidResponse(f"answer in an encoding not asked for ({', '.join(encodings)})")
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise _too_large(max_bytes, f"(Content-Length {int(length):,})")
    return encodings[0] if encodings else None


class AnswerBody:
    """An answer's body as it arrives: counted on the wire, decompressed a piece at a time, and refused
    (`AnswerTooLarge`) once more than `max_bytes` arrived or came out of the decoder."""

    __slots__ = ("inflate", "max_bytes", "parts", "produced", "received")

    def __init__(self, encoding: str | None, max_bytes: int, head: int = 0) -> None:
        """`head`: the bytes of the answer's headers, counted on the wire with the body's."""
        self.inflate = _Inflate(encoding) if encoding else None
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.received = head
        self.produced = 0

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.max_bytes:
            raise _too_large(self.max_bytes, "on the wire")
        if self.inflate is None:
            self.produced += len(chunk)
            self.parts.append(chunk)
            return
        for piece in self.inflate.decode(chunk):
            self.produced += len(piece)
            if self.produced > self.max_bytes:
                raise _too_large(self.max_bytes, "decompressed")
            self.parts.append(piece)

    def result(self) -> bytes:
        if self.inflate is not None and (rest := self.inflate.flush()):
            if self.produced + len(rest) > self.max_bytes:
                raise _too_large(self.max_bytes, "decompressed")
            self.parts.append(rest)
        parts, self.parts = self.parts, []
        return parts[0] if len(parts) == 1 else b"".join(parts)


def decoded_headers(raw: list[tuple[bytes, bytes]], encoding: str | None) -> list[tuple[bytes, bytes]]:
    """An answer's headers once its body is decoded here: without the coding and length it arrived in."""
    if encoding is None:
        return raw
    return [(k, v) for k, v in raw if k.lower() not in (b"content-encoding", b"content-length")]


_H11_HEAD_OVER = "Receive buffer too long"  # h11's words for a head over its buffer (tests/unit pin them)


class BoundedTransport(httpx.AsyncBaseTransport):
    """Answers of another transport (a test's, say) with their bodies read and decoded here, within
    `max_bytes` (etl's own transport, etl/client/wire.py, does this as the bytes arrive)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int) -> None:
        self.inner, self.max_bytes = inner, max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.RemoteProtocolError as exc:
            if str(exc) == _H11_HEAD_OVER:  # httpcore's h11 refused a head over MAX_HEAD
                raise head_too_large(self.max_bytes) from None
            raise
        try:
            head = sum(len(name) + len(value) + 4 for name, value in response.headers.raw)
            if head > head_limit(self.max_bytes):
                raise head_too_large(self.max_bytes)
            encoding = answer_encoding(response.headers, self.max_bytes)
            body = AnswerBody(encoding, self.max_bytes, head)
            assert isinstance(response.stream, httpx.AsyncByteStream)
            async for chunk in response.stream:  # as sent, also when made from bytes (read already)
                body.feed(chunk)
            content = body.result()
        finally:
            await response.aclose()
        return httpx.Response(
            response.status_code,
            headers=decoded_headers(response.headers.raw, encoding),
            content=content,
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
