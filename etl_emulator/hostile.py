"""Hostile answers: series answers that are odd but 200 (see faults.HOSTILE_KINDS), and odd records in
the object listing and the parameter lists (faults.RECORD_KINDS)."""

from __future__ import annotations

import asyncio
import functools
import gzip
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson

from etl_emulator.answers import Answer, Record

HUGE_BYTES = 4 * 1024 * 1024
_HUGE = "\u2191"  # replaced by HUGE_STAMP
_INFINITY = "\u221e"  # replaced by the bare token Infinity (once) and 1e309 (the others)
BOGUS = -999.0
DEEP = 1100  # levels of nesting of `deep_nesting`: deeper than Python's and orjson's parsers go
HUGE_STAMP = 10**20  # epoch ms beyond int64 (`huge_stamps`)
DRIP_SECONDS = 1.0  # between two bytes of a `drip` answer
ENDLESS_CHUNK = 64 * 1024
ENDLESS_MAX = 64 * 1024**3  # an `endless` answer stops here, if its client has not gone away before
STREAMED = ("drip", "endless")  # the first of two points at one stamp (`conflicting`)
HTML_200 = (
    b"<!DOCTYPE html><html><head><title>Maintenance</title></head><body>"
    b"<h1>Scheduled maintenance</h1><p>The service will be back shortly.</p></body></html>"
)


def _iso(ts: np.ndarray, *, offset_hours: int = 0, millis: bool = True) -> list[str]:
    local = (ts + offset_hours * 3_600_000).astype("datetime64[ms]")
    text = (local if millis else local.astype("datetime64[s]")).astype(str)
    suffix = f"{offset_hours:+03d}:00" if offset_hours else "Z"
    return [s + suffix for s in text.tolist()]


def hostile_body(
    kind: str,
    salt: int,
    param_id: int,
    columns: dict[str, np.ndarray],
    candles: bool,
    start_ms: int,
    end_ms: int,
    bomb_mb: int = 1024,
) -> Answer:
    """A series answer edited the `kind` way (transport kinds: sent slowly, endlessly, compressed).

    `columns` holds "ts" (epoch ms) and the value columns ("value", or "open", "high", "low",
    "close"). Timestamps are ISO strings in point answers and epoch ms in candles, except that
    `offsets` (same instant, written at +03:00) and `no_millis` (floored to the second, written
    without milliseconds) write ISO strings in candles too.
    """
    body, content_type = _body(kind, salt, param_id, columns, candles, start_ms, end_ms)
    if kind == "drip":
        return Answer(b"", content_type=content_type, stream=functools.partial(_drip, body))
    if kind == "endless":
        return Answer(b"", content_type=content_type, stream=functools.partial(_endless, body))
    if kind == "gzip_bomb":
        return Answer(gzip_bomb(bomb_mb), content_type=content_type, headers=[(b"content-encoding", b"gzip")])
    if kind == "huge_headers":
        return Answer(body, content_type=content_type, headers=huge_headers())
    if kind == "gzip_corrupt":
        packed = bytearray(gzip.compress(body))
        middle = len(packed) // 2
        packed[middle : middle + 8] = b"\xff" * 8
        return Answer(bytes(packed), content_type=content_type, headers=[(b"content-encoding", b"gzip")])
    return Answer(body, content_type=content_type)


async def _drip(body: bytes) -> AsyncIterator[bytes]:
    for i in range(len(body)):
        yield body[i : i + 1]
        await asyncio.sleep(DRIP_SECONDS)


async def _endless(body: bytes) -> AsyncIterator[bytes]:
    """The answer's start, then white space for ever (valid JSON so far, never closed)."""
    yield body[: body.index(b"[") + 1]
    pad = b" " * ENDLESS_CHUNK
    for _ in range(ENDLESS_MAX // ENDLESS_CHUNK):
        yield pad
        await asyncio.sleep(0)


HUGE_HEADERS_BYTES = 20 * 1024**2  # of a `huge_headers` answer's headers


@functools.cache
def huge_headers() -> list[tuple[bytes, bytes]]:
    """Headers of HUGE_HEADERS_BYTES in all, a kilobyte each (made once; every such answer shares them)."""
    value = b"a" * (1024 - len(b"x-padding-00000: \r\n"))
    return [(b"x-padding-%05d" % i, value) for i in range(HUGE_HEADERS_BYTES // 1024)]


@functools.lru_cache(maxsize=2)
def gzip_bomb(mb: int) -> bytes:
    """A gzip body that expands to `mb` MiB: a points answer padded with white space (about 1 MB a GiB).
    One MiB of padding is compressed once, ended by a full flush (which lets the decoder start afresh
    there), and repeated."""
    head, block, tail = b'{"points":[', b" " * 1024**2, b"]}"
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = packer.compress(head) + packer.flush(zlib.Z_FULL_FLUSH)
    padding = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.compress(tail) + packer.flush()
    crc = zlib.crc32(head)
    for _ in range(mb):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = len(head) + mb * len(block) + len(tail)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + start + padding * mb + end + struct.pack("<II", crc, size & 0xFFFFFFFF)


def _body(
    kind: str,
    salt: int,
    param_id: int,
    columns: dict[str, np.ndarray],
    candles: bool,
    start_ms: int,
    end_ms: int,
) -> tuple[bytes, bytes]:
    if kind == "empty_body":
        return b"", b"application/json"
    if kind == "html_200":
        return HTML_200, b"text/html; charset=utf-8"
    if kind == "error_200":
        return orjson.dumps({"error": "database timeout"}), b"application/json"
    if kind == "empty_object":
        return b"{}", b"application/json"
    rng = np.random.default_rng(salt)
    ts = columns["ts"].astype(np.int64)
    fields = [k for k in columns if k != "ts"]
    values = {k: columns[k].astype(object) for k in fields}
    n = len(ts)
    order = np.arange(n)
    if kind in ("nan", "null", "infinity", "string_values", "bool_values") and n:
        hit = rng.random(n) < 0.2
        hit[rng.integers(n)] = True
        for k in fields:
            if kind == "string_values":  # the right number, as text
                values[k][hit] = [str(v) for v in values[k][hit]]
            elif kind == "bool_values":
                values[k][hit] = [bool(v) for v in values[k][hit]]
            else:
                values[k][hit] = _INFINITY if kind == "infinity" else None
    elif kind == "duplicates" and n:
        order = np.sort(np.r_[order, rng.choice(n, size=max(1, n // 10))])
    elif kind == "conflicting" and n:
        # A bogus value first, the real one right after it, at the same stamp.
        order = np.sort(np.r_[order, rng.choice(n, size=max(1, n // 10), replace=False)])
        first = np.r_[order[1:] == order[:-1], False]
        for k in fields:
            values[k] = values[k][order]
            values[k][first] = BOGUS
        ts, order = ts[order], np.arange(len(order))
    elif kind == "shuffle":
        order = rng.permutation(n)
    elif kind == "outside":
        ts = np.r_[start_ms - 60_000, ts, end_ms + 60_000]
        for k in fields:
            edge = columns[k][:1].tolist() or [0.0]
            values[k] = np.r_[np.array(edge, dtype=object), values[k], np.array(edge, dtype=object)]
        order = np.arange(n + 2)
    if kind == "offsets":
        stamps: list[Any] = _iso(ts, offset_hours=3)  # text, or numbers as JSON writes them
    elif kind == "no_millis":
        stamps = _iso(ts, millis=False)
    elif kind == "epoch_seconds":
        stamps = (ts // 1000).tolist()
    elif kind == "date_only":
        stamps = [s[:10] for s in _iso(ts)]
    elif kind == "huge_stamps":
        stamps = [_HUGE] * n
    elif candles:
        stamps = ts.tolist()
    else:
        stamps = _iso(ts)
    rows = [
        dict(zip(("timestmp", *fields), row, strict=True))
        for row in zip(
            *(np.asarray(stamps, dtype=object)[order], *(values[k][order] for k in fields)), strict=True
        )
    ]
    key = "candles" if candles else "points"
    doc: dict[str, Any] = {"id": param_id, key: rows}
    if kind == "extra_fields":
        for row in rows:
            row["quality"] = "good"
        doc["meta"] = {"source": "emulator", "version": 2}
    elif kind == "missing_fields":
        del doc["id"]
    elif kind == "huge":
        doc["padding"] = "x" * HUGE_BYTES
    elif kind == "points_null":
        doc[key] = None
    elif kind == "misspelled":
        doc[key.capitalize()] = doc.pop(key)
    body = orjson.dumps(doc)
    if kind == "deep_nesting":  # beside the points (orjson writes at most 255 levels)
        body = body[:-1] + b',"meta":' + b"[" * DEEP + b"]" * DEEP + b"}"
    elif kind == "huge_stamps":
        body = body.replace(b'"%s"' % _HUGE.encode(), str(HUGE_STAMP).encode())
    if kind == "duplicate_key":  # the same key again, empty: a parser that keeps the last sees nothing
        body = body[:-1] + b',"%s":[]}' % key.encode()
    if kind == "nan":
        body = body.replace(b":null", b":NaN")
    elif kind == "infinity":  # the bare token, and a number too large for a double
        body = body.replace(b'"%s"' % _INFINITY.encode(), b"Infinity", 1)
        body = body.replace(b'"%s"' % _INFINITY.encode(), b"1e309")
    return body, (b"text/plain; charset=utf-8" if kind == "wrong_content_type" else b"application/json")


# -- odd records -----------------------------------------------------------------------------------

# Text no JSON encoder writes (a lone surrogate, 1,100 levels, an integer beyond 64 bits) goes in as a
# marker string and is swapped into the encoded body.
_MARKS = {
    "\u2063surrogate": b"\\ud800",  # inside a string: the escape of a lone surrogate
    "\u2063deep": b"[" * DEEP + b"]" * DEEP,
    "\u2063huge": str(2**70).encode(),
}
# A screen clear, a window title, an OSC-8 hyperlink, a carriage return over the start and a
# right-to-left override: what a name must not do to a terminal.
CONTROL_NAME = (
    "obj\x1b[2J\x1b]0;pwned\x07\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\rEVIL\u202egnp.exe"
)
MATHTEXT_NAME = "$x^2$ and $\\frac{$"  # mathtext that does not parse


def _encode(records: list[Record]) -> bytes:
    body = orjson.dumps(records)
    for mark, raw in _MARKS.items():
        # the surrogate goes inside a string; the others are a whole value
        body = body.replace(mark.encode() if mark.endswith("surrogate") else orjson.dumps(mark), raw)
    return body


def odd_objects(kinds: tuple[str, ...], found: list[Record]) -> bytes:
    """The object listing with the `kinds` of odd records: the first object's names and attributes
    edited, and a record whose id is not a number."""
    found = [dict(r) for r in found]
    if found:
        first = found[0]
        if "surrogate_name" in kinds:
            first["fullname"] = f"{first.get('fullname', '')} \u2063surrogate"
        if "deep_record" in kinds:
            first["attrs"] = {**first.get("attrs", {}), "nested": "\u2063deep"}
        if "control_names" in kinds:
            first["shortname"] = CONTROL_NAME
    if "text_id" in kinds:
        found.append({"id": "abc", "shortname": "not-a-number"})
    return _encode(found)


def odd_params(kinds: tuple[str, ...], found: list[Record], extras: bool = True) -> bytes:
    """A parameter list with the `kinds` of odd records: the first parameter's name edited, and (`extras`)
    copies of it whose id is beyond 64 bits, text, or a fraction."""
    found = [dict(r) for r in found]
    if found:
        first = found[0]
        if "huge_id" in kinds and extras:
            found.append({**first, "id": "\u2063huge"})
        if "text_id" in kinds and extras:
            found.append({**first, "id": "abc"})
        if "fractional_id" in kinds and extras:
            found.append({**first, "id": first["id"] + 0.5})
        if "surrogate_name" in kinds:
            first["name"] = f"{first.get('name', '')} \u2063surrogate"
        if "control_names" in kinds:
            first["name"] = CONTROL_NAME
        if "mathtext_names" in kinds:
            first["name"] = MATHTEXT_NAME
    return _encode(found)
