"""Decode measurement answers straight into numpy columns: no per-point objects survive parsing.

Point answers go through Arrow's JSON reader first (`read_points`: no Python object per point, and
no GIL); what it declines goes through a JSON parser (`decode_json`, then `parse_points` /
`parse_candles`). Both give the same columns for the same answer. A long listing (the objects) is
decoded one record at a time (`JsonArray`).
"""

from __future__ import annotations

import json
import logging
import re
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pajson

from etl.client.models import Candles, Points
from etl.errors import InvalidResponse
from etl.support import redact
from etl.timeutil import parse_iso_ms

log = logging.getLogger(__name__)


# Deeper than this the stdlib parser (Python's recursion limit) and orjson (1,024) give up.
TOO_DEEP = "nested deeper than the JSON parser reads (about 1,000 levels)"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def decode_json(body: bytes) -> Any:
    """orjson first; the stdlib parser second because it accepts the bare NaN some servers send (and
    the lone UTF-16 surrogates orjson refuses: they become U+FFFD, see `mend`)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        doc = json.loads(body)
    except RecursionError:
        raise InvalidResponse(f"answer {TOO_DEEP}") from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidResponse(f"answer is not valid JSON ({len(body)} bytes: {_excerpt(body)})") from None
    return mend(doc) if _SURROGATE_ESCAPE_BYTES.search(body) else doc


def mend(value: Any) -> Any:
    """`value` with every unpaired UTF-16 surrogate (an escape like \\ud800 alone) as U+FFFD: no UTF-8
    file or terminal takes one. Says so in the log when it found any."""
    found = [0]

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            text, count = _LONE_SURROGATE.subn("\ufffd", item)
            found[0] += count
            return text
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        return item

    try:
        mended = walk(value)
    except RecursionError:
        raise InvalidResponse(f"answer {TOO_DEEP}") from None
    if found[0]:
        log.warning(
            "an answer held %d unpaired UTF-16 surrogate(s) (\\ud800-\\udfff escapes alone): read as U+FFFD",
            found[0],
        )
    return mended


_SPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, pos: int) -> int:
    """The position of the first character at or after `pos` that is not JSON white space."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


class JsonArray:
    """A JSON array decoded one element at a time: a listing of thousands of records is never all
    Python objects at once (they would scatter the long-lived objects made meanwhile across the
    allocator's arenas, and those would pin the listing's peak for the rest of the run). The body is
    checked whole on arrival, so a malformed one is refused (and retried) like any other. An element
    nested deeper than the parser reads is left out, its position and why in `unreadable`."""

    def __init__(self, body: bytes) -> None:
        try:
            self._text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidResponse(f"answer is not valid JSON ({len(body)} bytes: {_excerpt(body)})") from None
        self._starts = array("q")
        self._positions = array("q")  # each readable element's position in the array
        self.unreadable: list[tuple[int, str]] = []
        self._surrogates = _SURROGATE_ESCAPE.search(self._text) is not None
        for position, start in self._scan():
            self._positions.append(position)
            self._starts.append(start)

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self) -> Iterator[Any]:
        return (record for _, record in self.items())

    def items(self) -> Iterator[tuple[int, Any]]:
        """(position in the array, element) of each readable element."""
        decode = json.JSONDecoder().raw_decode
        for position, start in zip(self._positions, self._starts, strict=True):
            record = decode(self._text, start)[0]
            yield position, mend(record) if self._surrogates else record

    def _scan(self) -> Iterator[tuple[int, int]]:
        """Where each element starts; each is parsed once to find its end, then let go."""
        text, decode = self._text, json.JSONDecoder().raw_decode
        pos = _skip(text, 0)
        if text[pos : pos + 1] != "[":
            raise InvalidResponse(f"expected a JSON array ({len(text)} chars: {_excerpt(text)})")
        pos = _skip(text, pos + 1)
        separator = ","
        if text[pos : pos + 1] == "]":  # empty
            separator, pos = "]", _skip(text, pos + 1)
        position = 0
        while separator == ",":
            try:
                _, end = decode(text, pos)
            except RecursionError:
                self.unreadable.append((position, TOO_DEEP))
                end = _value_end(text, pos)
            except ValueError:
                raise InvalidResponse(
                    f"answer is not valid JSON (at char {pos}: {_excerpt(text[pos:])})"
                ) from None
            else:
                yield position, pos
            position += 1
            pos = _skip(text, end)
            separator = text[pos : pos + 1]
            if separator not in (",", "]"):
                raise InvalidResponse(f"answer is not valid JSON (at char {pos}: {_excerpt(text[pos:])})")
            pos = _skip(text, pos + 1)
        if pos != len(text):
            raise InvalidResponse(f"answer is not valid JSON (after the array: {_excerpt(text[pos:])})")


def _value_end(text: str, pos: int) -> int:
    """Where the array or object at `pos` ends, found without recursion (it is too deep to parse)."""
    depth, i, n = 0, pos, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise InvalidResponse(f"answer is not valid JSON (unterminated at char {pos})")


def _excerpt(body: bytes | str, size: int = 60) -> str:
    return repr(redact.excerpt(body, size) + ("..." if len(body) > size else ""))


def _items(doc: Any, key: str) -> list[dict[str, Any]]:
    """The records of a series answer: `{key: [...]}` as the document shows it. The signal answer's shape
    is not documented: a bare list, and the other series' key, are taken too. Anything else (an error
    object, `{}`, a null or misspelled list) is not a series answer."""
    if isinstance(doc, list):
        items: list[dict[str, Any]] = doc
    elif isinstance(doc, dict) and isinstance(doc.get(key), list):
        items = doc[key]
    elif isinstance(doc, dict) and key not in doc and isinstance(doc.get(_OTHER[key]), list):
        items = doc[_OTHER[key]]
    else:
        raise InvalidResponse(f"not a series answer: no '{key}' list in {_excerpt(_dumps(doc), 80)}")
    if items and not all(isinstance(p, dict) for p in items):
        raise InvalidResponse(f"'{key}' holds something other than records")
    return items


_OTHER = {"points": "candles", "candles": "points"}


def _dumps(doc: Any) -> str:
    try:
        return orjson.dumps(doc).decode()
    except (TypeError, ValueError):
        return repr(doc)


def _repeated_keys(body: bytes) -> str | None:
    """The first key an object of the answer holds twice, if any: parsers keep one of the two values
    (orjson and Arrow the last), so such an answer means two things at once. Only answers that spell a
    series key more than once are parsed again to find out."""
    if body.count(b'"points"') + body.count(b'"candles"') < 2:
        return None
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if not repeated:
            seen: set[str] = set()
            for name, _ in items:
                if name in seen:
                    repeated.append(name)
                    break
                seen.add(name)
        return dict(items)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None  # the decoder says what is wrong with it
    return repeated[0] if repeated else None


_NUMBERS = frozenset({int, float, type(None)})


def _floats(items: list[dict[str, Any]], key: str) -> np.ndarray:
    values = [p.get(key) for p in items]
    if not _NUMBERS.issuperset(map(type, values)):  # text ("12.5") and booleans are not numbers
        odd = next(v for v in values if type(v) not in _NUMBERS)
        raise InvalidResponse(f"non-numeric '{key}' in answer: {_excerpt(_dumps(odd), 40)}")
    try:
        return np.array(values, dtype=np.float64)  # None -> nan
    except (TypeError, ValueError, OverflowError):
        raise InvalidResponse(f"non-numeric '{key}' in answer") from None


def _stamps(items: list[dict[str, Any]]) -> np.ndarray:
    try:
        return parse_iso_ms([p.get("timestmp") for p in items])
    except (ValueError, TypeError) as exc:
        raise InvalidResponse(str(exc)) from None
    except OverflowError:
        raise InvalidResponse("a stamp in the answer is beyond 64-bit epoch milliseconds") from None


def parse_points(doc: Any) -> Points:
    items = _items(doc, "points")
    return Points(ts=_stamps(items), value=_floats(items, "value"))


def parse_candles(doc: Any) -> Candles:
    items = _items(doc, "candles")
    return Candles(
        ts=_stamps(items),
        open=_floats(items, "open"),
        high=_floats(items, "high"),
        low=_floats(items, "low"),
        close=_floats(items, "close"),
    )


# Arrow's reader has a fixed cost a call whatever the size; below this, orjson and the numpy stamp
# parser are cheaper (docs/performance.md). Above it Arrow is as fast or faster, and it releases the GIL,
# so such bodies are decoded in a thread beside the event loop.
SMALL_ANSWER = 48 * 1024


def decode_points(body: bytes) -> Points:
    """The points of a point answer. Whatever is wrong with it is an InvalidResponse raised here, inside
    the request, so that it is retried like any unreadable answer."""
    # Arrow's reader refuses an answer that holds a key it reads twice, so the answers it takes skip the
    # check for a repeated series key: two scans of the whole body that hold the GIL.
    if len(body) > SMALL_ANSWER and (points := read_points(body)) is not None:
        return points
    if (key := _repeated_keys(body)) is not None:
        raise InvalidResponse(f"the answer holds the key '{key}' more than once")
    return parse_points(decode_json(body))


def decode_candles(body: bytes) -> Candles:
    if (key := _repeated_keys(body)) is not None:
        raise InvalidResponse(f"the answer holds the key '{key}' more than once")
    return parse_candles(decode_json(body))


# -- the fast path -------------------------------------------------------------------------------
# Arrow's JSON reader parses the whole answer in C++ without holding the GIL (so it runs beside the
# event loop), straight into columns, stamps included. Where it accepts a value it reads it as the
# JSON path does (numbers bit for bit, ISO 8601 stamps to the same instant; tests/unit/client/test_decode.py);
# what it refuses (NaN, epoch-ms stamps, odd shapes) and nulls are left to the JSON path.

_POINTS_SCHEMA = pa.schema(
    [
        (
            "points",
            pa.list_(pa.struct([("timestmp", pa.timestamp("ms", tz="UTC")), ("value", pa.float64())])),
        ),
    ]
)
_PARSE = pajson.ParseOptions(explicit_schema=_POINTS_SCHEMA, unexpected_field_behavior="ignore")


def read_points(body: bytes) -> Points | None:
    """Points of a `{"points": [{"timestmp": ISO, "value": number}, ...]}` answer; None if unusual."""
    options = pajson.ReadOptions(use_threads=False, block_size=max(len(body) + 1, 1 << 16))
    try:
        # The streaming reader, not `read_json`: that one starts (and ends) a thread on every call of each
        # answer's decoding.
        reader = pajson.open_json(pa.BufferReader(body), read_options=options, parse_options=_PARSE)
        table = reader.read_all()
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != 1:
        return None
    points = table.column("points").combine_chunks()
    if points.null_count:
        return None
    records = points.flatten()
    if records.null_count:
        return None
    stamps, values = records.flatten()
    if stamps.null_count or values.null_count:
        return None
    return Points(ts=stamps.cast(pa.int64()).to_numpy(), value=values.to_numpy())
