"""Decoding what a hostile server sends: every odd value is an InvalidResponse, a left-out record or a
mended string; never a RecursionError, an OverflowError or a multi-line validation error."""

from __future__ import annotations

import logging

import pytest

from etl.client.models import ObjectFull, record_id
from etl.client.series import JsonArray, decode_json, decode_points, parse_candles
from etl.errors import InvalidResponse

DEEP = b"[" * 1100 + b"]" * 1100


def test_an_answer_deeper_than_the_parser_reads_is_invalid():
    for body in (DEEP, b'{"points": [], "meta": ' + DEEP + b"}"):
        with pytest.raises(InvalidResponse, match="nested deeper than the JSON parser reads"):
            decode_json(body)
        with pytest.raises(InvalidResponse, match="nested deeper"):
            decode_points(body)


def test_a_listing_leaves_out_only_the_element_too_deep_to_read():
    body = b'[{"id": 1}, {"id": 2, "attrs": {"x": ' + DEEP + b'}}, {"id": 3, "name": "a]\\"[b"}]'
    listing = JsonArray(body)
    assert [r["id"] for r in listing] == [1, 3]
    assert [position for position, _ in listing.items()] == [0, 2]
    assert listing.unreadable == [(1, "nested deeper than the JSON parser reads (about 1,000 levels)")]


def test_lone_surrogates_are_read_as_replacement_characters_and_said_so(caplog):
    caplog.set_level(logging.WARNING)
    doc = decode_json(b'{"name": "a\\ud800b", "pair": "\\ud83d\\ude00", "\\udfff": 1}')
    assert doc == {"name": "a\ufffdb", "pair": "\U0001f600", "\ufffd": 1}
    assert [r["name"] for r in JsonArray(b'[{"name": "x\\uDC00"}]')] == ["x\ufffd"]
    assert "unpaired UTF-16 surrogate" in caplog.text
    "\ufffd".encode()  # writable as UTF-8


@pytest.mark.parametrize(
    "stamp", [b"100000000000000000000", b"1e20", b"-1e300"], ids=["int-beyond-64-bits", "float", "huge"]
)
def test_stamps_beyond_64_bit_milliseconds_are_invalid(stamp):
    body = b'{"candles": [{"timestmp": %s, "open": 1, "high": 1, "low": 1, "close": 1}]}' % stamp
    with pytest.raises(InvalidResponse, match="beyond 64-bit"):
        parse_candles(decode_json(body))


@pytest.mark.parametrize(
    "value, problem",
    [
        ("abc", "not an integer"),
        (5000.5, "not an integer"),
        (2**70, "beyond 64 bits"),
        (None, "not an integer"),
        (True, "not an integer"),
        ([1], "not an integer"),
    ],
)
def test_record_ids_must_be_64_bit_integers(value, problem):
    with pytest.raises(ValueError, match=problem):
        record_id(value)


def test_record_ids_as_the_platform_may_write_them():
    assert [record_id(v) for v in (5, 5.0, "5", " 7 ", -3)] == [5, 5, 5, 7, -3]
    with pytest.raises(Exception) as raised:
        ObjectFull.model_validate({"id": 2**70})
    assert "less than or equal" in str(raised.value)
