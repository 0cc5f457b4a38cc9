"""Answers read within a size limit, decompressed as they come.

httpx decompresses a gzip body whole before anyone sees it, so a 1 MB body that expands to 1 GiB
(a gzip bomb) would be 1 GiB in memory, and a body that never ends would grow for ever. Here the
transport hands httpx an answer whose body is already decoded, piece by piece as it arrived
(`AnswerBody`), and stops with `AnswerTooLarge` once more than `max_bytes` arrived on the wire or came
out of the decoder. An answer then holds at most `max_bytes` (twice, while its pieces are joined) per
request in flight.

The encodings asked for are gzip and deflate; br (with the `brotli` package) and zstd (the standard
library's from Python 3.14, `backports.zstd` before) are decoded as well when a server sends them anyway.
"""

from __future__ import annotations

import functools
import importlib
import zlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Protocol

import httpx

from etl.errors import AnswerTooLarge, InvalidResponse

# The encodings asked for: those every server has and every run was measured with (br and zstd, decoded
# too, are not asked for).
ACCEPT_ENCODING = "gzip, deflate"
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


class _Decoder(Protocol):
    """A content coding undone a bounded piece at a time: `decode` yields the output of some input,
    `flush` what is left at the end of the body (or an InvalidResponse when it ended early)."""

    def decode(self, data: bytes) -> Iterator[bytes]: ...

    def flush(self) -> bytes: ...


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


class _Brotli:
    """br, decoded a bounded piece at a time (brotli's output_buffer_limit, since 1.2)."""

    def __init__(self, brotli: Any) -> None:
        self._brotli = brotli
        self._decompressor = brotli.Decompressor()

    def decode(self, data: bytes) -> Iterator[bytes]:
        try:
            while True:  # an empty piece: the input is used up
                piece: bytes = self._decompressor.process(data, output_buffer_limit=PIECE)
                if not piece:
                    return
                data = b""
                yield piece
        except self._brotli.error as exc:
            raise InvalidResponse(f"corrupt br body ({exc})") from None

    def flush(self) -> bytes:
        if not self._decompressor.is_finished():
            raise InvalidResponse("br body ended early")
        return b""


# The window a zstd frame may ask the decoder to hold: 8 MiB, as RFC 9659 bounds it for HTTP.
_ZSTD_WINDOW_LOG = 23


class _Zstd:
    """zstd, decoded a bounded piece at a time, frame after frame."""

    def __init__(self, zstd: Any) -> None:
        self._zstd = zstd
        self._decompressor = self._new()

    def _new(self) -> Any:
        options = {self._zstd.DecompressionParameter.window_log_max: _ZSTD_WINDOW_LOG}
        return self._zstd.ZstdDecompressor(options=options)

    def decode(self, data: bytes) -> Iterator[bytes]:
        try:
            while True:
                if self._decompressor.eof:  # a frame ended: what follows is the next one
                    data = self._decompressor.unused_data + data
                    if not data:
                        return
                    self._decompressor = self._new()
                piece: bytes = self._decompressor.decompress(data, PIECE)
                data = b""
                if piece:
                    yield piece
                if self._decompressor.needs_input and not self._decompressor.eof:
                    return
        except self._zstd.ZstdError as exc:
            raise InvalidResponse(f"corrupt zstd body ({exc})") from None

    def flush(self) -> bytes:
        if not self._decompressor.eof:
            raise InvalidResponse("zstd body ended early")
        return b""


# An encoding not asked for but decoded when it comes: the module it needs (the first that imports).
_MODULES = {"br": ("brotli",), "zstd": ("compression.zstd", "backports.zstd")}
_MAKERS: dict[str, Callable[[Any], _Decoder]] = {"br": _Brotli, "zstd": _Zstd}


@functools.cache
def _module(encoding: str) -> ModuleType | None:
    """Imported at the first answer in `encoding`: most runs never see one."""
    for name in _MODULES[encoding]:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def decoder(encoding: str) -> _Decoder:
    """The decoder of an encoding `answer_encoding` returned."""
    if encoding in ("gzip", "deflate"):
        return _Inflate(encoding)
    module = _module(encoding)
    assert module is not None
    return _MAKERS[encoding](module)


def answer_encoding(headers: httpx.Headers | dict[str, str], max_bytes: int) -> str | None:
    """The answer's content coding to undo (none, one asked for, or br or zstd where their module is
    installed), refusing any other and a Content-Length over `max_bytes` before any of the body is
    read."""
    encodings = [
        e.strip().lower()
        for e in headers.get("content-encoding", "").split(",")
        if e.strip().lower() not in ("", "identity")
    ]
    if len(encodings) > 1:
        raise InvalidResponse(f"answer in several encodings at once ({', '.join(encodings)}), not asked for")
    if encodings and encodings[0] not in ("gzip", "deflate"):
        if encodings[0] not in _MODULES:
            raise InvalidResponse(f"answer in an encoding not asked for ({encodings[0]})")
        if _module(encodings[0]) is None:
            raise InvalidResponse(
                f"answer in an encoding not asked for ({encodings[0]}); etl reads it with "
                f"{' or '.join(_MODULES[encodings[0]])} installed"
            )
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise _too_large(max_bytes, f"(Content-Length {int(length):,})")
    return encodings[0] if encodings else None


class AnswerBody:
    """An answer's body as it arrives: counted on the wire, decompressed a piece at a time, and refused
    (`AnswerTooLarge`) once more than `max_bytes` arrived or came out of the decoder."""

    __slots__ = ("decoder", "max_bytes", "parts", "produced", "received")

    def __init__(self, encoding: str | None, max_bytes: int, head: int = 0) -> None:
        """`head`: the bytes of the answer's headers, counted on the wire with the body's."""
        self.decoder = decoder(encoding) if encoding else None
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.received = head
        self.produced = 0

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.max_bytes:
            self.parts = []
            raise _too_large(self.max_bytes, "on the wire")
        if self.decoder is None:
            self.produced += len(chunk)
            self.parts.append(chunk)
            return
        try:
            for piece in self.decoder.decode(chunk):
                self.produced += len(piece)
                if self.produced > self.max_bytes:
                    raise _too_large(self.max_bytes, "decompressed")
                self.parts.append(piece)
        except InvalidResponse:  # over the limit, or corrupt: what came so far goes at once, not with
            self.parts = []  # the traceback's frames (this one among them) when the error is freed
            raise

    def result(self) -> bytes:
        if self.decoder is not None and (rest := self.decoder.flush()):
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
    """Answers of another transport (httpx's, a test's) with their bodies read and decoded here, within
    `max_bytes` (etl's own transport, etl/client/wire.py, does this as the bytes arrive). `via`: the proxy
    the inner transport goes through, named in its errors."""

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int, via: str | None = None) -> None:
        self.inner, self.max_bytes, self.via = inner, max_bytes, via

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.RemoteProtocolError) and str(exc) == _H11_HEAD_OVER:
                raise head_too_large(self.max_bytes) from None  # httpcore's h11 refused a head over MAX_HEAD
            if self.via is None:
                raise
            # The cause stays: a TLS failure is told apart by it (client/classify.py).
            raise type(exc)(
                f"through the proxy {self.via}: {exc or type(exc).__name__}", request=request
            ) from exc
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
