"""Answers read within a size limit, decompressed as they come.

httpx decompresses a gzip body whole before anyone sees it, so a 1 MB body that expands to 1 GiB
(a gzip bomb) would be 1 GiB in memory, and a body that never ends would grow for ever. Here the
transport hands httpx an answer whose body is already decoded, chunk by chunk, and stops with
`AnswerTooLarge` once more than `max_bytes` arrived on the wire or came out of the decoder. An answer
then holds at most `max_bytes` (twice, while httpx joins its chunks) per request in flight.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator

import httpx

from etl.errors import AnswerTooLarge, InvalidResponse

ACCEPT_ENCODING = "gzip, deflate"  # the encodings decoded here (httpx would also offer br and zstd)
PIECE = 256 * 1024  # bytes decompressed at a time


def _too_large(max_bytes: int, where: str) -> AnswerTooLarge:
    return AnswerTooLarge(f"answer over {max_bytes / 1024**2:g} MiB (source.max_answer_mb) {where}")


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


class _BoundedBody(httpx.AsyncByteStream):
    def __init__(self, raw: httpx.AsyncByteStream, encoding: str | None, max_bytes: int) -> None:
        self.raw, self.max_bytes = raw, max_bytes
        self.inflate = _Inflate(encoding) if encoding else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = produced = 0
        async for chunk in self.raw:
            received += len(chunk)
            if received > self.max_bytes:
                raise _too_large(self.max_bytes, "on the wire")
            for piece in self.inflate.decode(chunk) if self.inflate else (chunk,):
                produced += len(piece)
                if produced > self.max_bytes:
                    raise _too_large(self.max_bytes, "decompressed" if self.inflate else "on the wire")
                yield piece
        if self.inflate is not None and (rest := self.inflate.flush()):
            if produced + len(rest) > self.max_bytes:
                raise _too_large(self.max_bytes, "decompressed")
            yield rest

    async def aclose(self) -> None:
        await self.raw.aclose()


class BoundedTransport(httpx.AsyncBaseTransport):
    """Answers of `inner` with their bodies decoded here, within `max_bytes`."""

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int) -> None:
        self.inner, self.max_bytes = inner, max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        encodings = [
            e.strip().lower()
            for e in response.headers.get("content-encoding", "").split(",")
            if e.strip().lower() not in ("", "identity")
        ]
        length = response.headers.get("content-length", "")
        try:
            if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "deflate")):
                raise InvalidResponse(f"answer in an encoding not asked for ({', '.join(encodings)})")
            if length.isdigit() and int(length) > self.max_bytes:
                raise _too_large(self.max_bytes, f"(Content-Length {int(length):,})")
        except InvalidResponse:
            await response.aclose()
            raise
        headers = response.headers
        if encodings:  # what httpx sees is decoded already
            headers = httpx.Headers(
                [(k, v) for k, v in headers.raw if k.lower() not in (b"content-encoding", b"content-length")]
            )
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_BoundedBody(response.stream, encodings[0] if encodings else None, self.max_bytes),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
