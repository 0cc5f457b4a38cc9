"""Answers read within source.max_answer_mb, decompressed as they come (etl/client/answer_size.py)."""

from __future__ import annotations

import asyncio
import gzip
import random
import zlib

import brotli
import httpx
import pytest

try:
    from compression import zstd  # Python 3.14's
except ImportError:
    from backports import zstd

from etl.client.answer_size import BoundedTransport
from etl.errors import AnswerTooLarge, InvalidResponse

BODY = b'{"points": []}' + b" " * 10_000
NOISY = bytes(random.Random(1).choices(b"0123456789abcdef", k=20_000))  # does not compress to nothing
PACKED = gzip.compress(NOISY)


def fetch(body: bytes, headers: dict[str, str], max_bytes: int = 64 * 1024, chunks: int = 1) -> bytes:
    """The body httpx reads through BoundedTransport from a server answering `body` in `chunks`."""

    class Chunked(httpx.AsyncByteStream):
        async def __aiter__(self):
            step = max(1, len(body) // chunks)
            for i in range(0, len(body), step):
                yield body[i : i + step]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=Chunked())

    async def go() -> bytes:
        transport = BoundedTransport(httpx.MockTransport(answer), max_bytes)
        async with httpx.AsyncClient(transport=transport) as client:
            return (await client.get("http://server/x")).content

    return asyncio.run(go())


@pytest.mark.parametrize(
    "encoding, packed",
    [
        ("gzip", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),  # as the RFC says
        ("deflate", zlib.compress(BODY)[2:-4]),  # raw, as some servers send it
        ("identity", BODY),
        ("br", brotli.compress(BODY)),
        ("zstd", zstd.compress(BODY)),
        ("zstd", zstd.compress(BODY[:5000]) + zstd.compress(BODY[5000:])),  # frames one after another
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw", "identity", "br", "zstd", "zstd-frames"],
)
def test_bodies_are_decoded_whole_below_the_limit(encoding, packed):
    assert fetch(packed, {"content-encoding": encoding}, chunks=7) == BODY


@pytest.mark.parametrize(
    "encoding, pack", [("gzip", gzip.compress), ("br", brotli.compress), ("zstd", zstd.compress)]
)
def test_a_bomb_stops_at_the_limit_decompressed(encoding, pack):
    bomb = pack(b" " * 50 * 1024**2)  # 50 MiB in at most ~50 kB
    with pytest.raises(AnswerTooLarge, match="answer over 1 MiB .* decompressed"):
        fetch(bomb, {"content-encoding": encoding}, max_bytes=1024**2, chunks=3)


def test_a_zstd_frame_that_asks_for_a_window_over_8_mib_is_refused():
    """A frame may ask its decoder to hold a window of up to 2 GiB; HTTP's zstd is bound to 8 MiB."""
    packer = zstd.ZstdCompressor(options={zstd.CompressionParameter.window_log: 27})
    wide = packer.compress(b"x" * 1024) + packer.flush()  # streamed: the frame names its window, not its size
    with pytest.raises(InvalidResponse, match="corrupt zstd body"):
        fetch(wide, {"content-encoding": "zstd"})


def test_an_encoding_whose_module_is_missing_says_which_arrived_and_what_reads_it(monkeypatch):
    import etl.client.answer_size as answer_size

    monkeypatch.setattr(answer_size, "_module", lambda encoding: None)
    with pytest.raises(InvalidResponse, match=r"encoding not asked for \(br\); etl reads it with brotli"):
        fetch(brotli.compress(BODY), {"content-encoding": "br"})


def test_a_long_body_stops_at_the_limit_on_the_wire_or_at_its_content_length():
    with pytest.raises(AnswerTooLarge, match="on the wire"):
        fetch(BODY, {}, max_bytes=4096, chunks=10)
    with pytest.raises(AnswerTooLarge, match="Content-Length 10,014"):
        fetch(BODY, {"content-length": str(len(BODY))}, max_bytes=4096)


@pytest.mark.parametrize(
    "packed, headers, problem",
    [
        (PACKED[:5000] + b"\xff" * 64 + PACKED[5064:], {"content-encoding": "gzip"}, "corrupt|ended early"),
        (PACKED[:-12], {"content-encoding": "gzip"}, "ended early"),
        (BODY, {"content-encoding": "br"}, "corrupt br body"),
        (brotli.compress(BODY)[:-8], {"content-encoding": "br"}, "br body ended early"),
        (zstd.compress(BODY)[:-8], {"content-encoding": "zstd"}, "zstd body ended early"),
        (BODY, {"content-encoding": "compress"}, r"encoding not asked for \(compress\)"),
        (BODY, {"content-encoding": "gzip, br"}, r"several encodings at once \(gzip, br\), not asked for"),
    ],
    ids=["corrupt", "truncated", "br-corrupt", "br-truncated", "zstd-truncated", "unasked", "stacked"],
)
def test_unreadable_encodings_are_invalid_answers(packed, headers, problem):
    with pytest.raises(InvalidResponse, match=problem) as raised:
        fetch(packed, headers)
    assert raised.value.retryable  # a damaged answer may come whole next time
