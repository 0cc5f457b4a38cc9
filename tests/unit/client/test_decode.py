"""The fast point reader agrees with the JSON path on every answer it accepts, and takes the usual ones;
the element-by-element array decoder agrees with the JSON parser on every body."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.client.series import (
    SMALL_ANSWER,
    JsonArray,
    decode_json,
    decode_points,
    parse_points,
    read_points,
)
from etl.errors import InvalidResponse
from etl.timeutil import parse_iso_ms
from etl_emulator.encode import encode_points, iso_strings

# 2017..2030: the emulator's encoder tabulates every day between the first and the last stamp
stamps = st.lists(st.integers(1_500_000_000_000, 1_900_000_000_000), max_size=40).map(
    lambda xs: np.array(sorted(xs), np.int64)
)
decimals = st.floats(-9999.999, 9999.999, allow_nan=False).map(lambda v: round(v, 3))
doubles = st.floats(allow_nan=False, allow_infinity=False)


def reference(body: bytes):
    """What the plain JSON path makes of an answer: Points, or the error it raises."""
    try:
        return parse_points(decode_json(body))
    except (ValueError, InvalidResponse):
        return "error"


def same(a, b) -> bool:
    return np.array_equal(a.ts, b.ts) and np.array_equal(a.value, b.value, equal_nan=True)


@settings(max_examples=150, deadline=None)
@given(stamps, st.data())
def test_emulator_and_compact_answers_take_the_fast_path_and_match(ts, data):
    values = np.array(data.draw(st.lists(decimals, min_size=len(ts), max_size=len(ts))), np.float64)
    full = np.array(data.draw(st.lists(doubles, min_size=len(ts), max_size=len(ts))), np.float64)
    iso = iso_strings(ts)
    bodies = [
        encode_points(1001, ts, values),  # padded numbers, as the emulator writes them
        orjson.dumps(
            {
                "id": 1001,
                "points": [{"timestmp": s, "value": v} for s, v in zip(iso, full.tolist(), strict=True)],
            }
        ),
        json.dumps(
            {"points": [{"value": v, "timestmp": s} for s, v in zip(iso, values.tolist(), strict=True)]},
            indent=2,
        ).encode(),  # other key order, newlines
    ]
    for body in bodies:
        fast = read_points(body)
        assert fast is not None, body[:200]
        assert same(fast, reference(body))


ODD = [
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":NaN}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":null}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z"}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":"12.5"}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T03:00:00.000+03:00","value":1}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00Z","value":1}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000","value":1}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01","value":1}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.00012Z","value":1}]}',
    b'{"id":1,"points":[{"timestmp":null,"value":1}]}',
    b'{"id":1,"points":[{"timestmp":"2026-02-30T00:00:00.000Z","value":1}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T24:00:00.000Z","value":1}]}',
    b'{"id":1,"points":[{"timestmp":1793491200000,"value":1}]}',
    b'{"id":1,"points":[null]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":1,"quality":{"ok":true}}],"meta":{}}',
    b'{"id":1,"points":[]}',
    b'{"id":1}',
    b'[{"timestmp":"2026-11-01T00:00:00.000Z","value":1}]',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":1}]}\n{"id":2,"points":[]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":1}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":1e400}]}',
    b'{"id":1,"points":[{"timestmp":"2026-11-01T00:00:00.000Z","value":1,"value":2}]}',
    b"not json",
]


@pytest.mark.parametrize("body", ODD, ids=range(len(ODD)))
def test_odd_answers_decode_as_the_json_path_does(body):
    want = reference(body)
    try:
        got = decode_points(body)
    except (ValueError, InvalidResponse):
        got = "error"
    assert (got == "error") if isinstance(want, str) else same(got, want)


def test_a_large_answer_that_repeats_its_series_key_is_refused():
    """Answers over SMALL_ANSWER skip the scan for a repeated key when Arrow's reader takes them: that
    relies on the reader refusing a key it reads twice."""
    n = SMALL_ANSWER // 40
    body = encode_points(1, np.arange(n, dtype=np.int64) * 1000 + 1_793_491_200_000, np.ones(n))
    assert len(body) > SMALL_ANSWER and read_points(body) is not None
    repeated = body[:-1] + b',"points":[]}'
    assert read_points(repeated) is None
    with pytest.raises(InvalidResponse, match="more than once"):
        decode_points(repeated)


def test_canonical_stamps_are_checked_digit_by_digit():
    good = ["2024-02-29T23:59:59.999Z", "1970-01-01T00:00:00.000Z", "2026-11-01T12:34:56.789Z"]
    want = np.array([np.datetime64(s[:-1], "ms").astype(np.int64) for s in good])
    assert (parse_iso_ms(good) == want).all()
    # not canonical but readable: the slow path reads it
    assert (parse_iso_ms(["2026-11-01 12:34:56.789Z"]) == parse_iso_ms([good[2]])).all()
    for bad in [
        "2025-02-29T00:00:00.000Z",
        "2026-13-01T00:00:00.000Z",
        "2026-11-01T00:60:00.000Z",
        "2026-11-01T24:00:00.000Z",
        "2026-11-01T00:00:00.0a0Z",
    ]:
        with pytest.raises(ValueError):
            parse_iso_ms([bad])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
spacing = st.sampled_from(["", " ", "\n", " \t\r\n "])


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, max_size=6), spacing, spacing, st.booleans())
def test_json_array_gives_each_element_as_the_json_parser_does(items, before, after, indent):
    body = json.dumps(items, indent=2 if indent else None)
    body = (before + body + after).encode()
    decoded = JsonArray(body)
    assert len(decoded) == len(items)
    assert list(decoded) == json.loads(body) == list(decoded)  # and it can be walked again


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b'"[1]"',
        b"[",
        b"[1",
        b"[1,]",
        b"[,1]",
        b"[1 2]",
        b"[1]]",
        b"[1] x",
        b"[{]",
        b'[{"a": 1}, {"a": }]',
        b"<html>[1]</html>",
        b"\xff[1]",
    ],
)
def test_json_array_refuses_what_is_not_one_json_array(body):
    with pytest.raises(InvalidResponse):
        JsonArray(body)


def test_json_array_takes_the_bare_nan_some_servers_send():
    assert [str(v) for v in JsonArray(b"[NaN, 1.5]")] == ["nan", "1.5"]
