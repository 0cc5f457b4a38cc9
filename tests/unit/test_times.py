"""Times people type: epoch numbers read by their unit, never silently as another one (issue 21)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etl.timeutil import parse_time, to_ms

MS = to_ms("2026-11-01T00:00:00Z")


@pytest.mark.parametrize(
    "text",
    [
        "1793491200",
        "1793491200000",
        "1793491200000000",
        "1793491200s",
        "1793491200000ms",
        "1793491200000000us",
        "2026-11-01T00:00:00Z",
        "2026-11-01T03:00:00+03:00",
    ],
)
def test_every_way_of_writing_one_moment_reads_the_same(text):
    assert parse_time(text) == MS


@pytest.mark.parametrize("text", ["0", "86400000", "12345678901", "99999999999999", "-1793491200"])
def test_an_epoch_number_whose_unit_could_be_two_is_refused(text):
    with pytest.raises(ValueError, match="cannot tell the unit"):
        parse_time(text)


def test_a_unit_written_out_is_taken_at_its_word():
    assert parse_time("86400000ms") == 86_400_000 and parse_time("0s") == 0


# 1973-03-03 .. 2286-11-20 in ms: every unit has a distinct count of digits there.
@given(st.integers(min_value=100_000_000_000, max_value=9_999_999_999_999))
def test_seconds_milliseconds_and_microseconds_are_told_apart(ms):
    assert parse_time(str(ms)) == ms
    assert parse_time(str(ms * 1000)) == ms
    if ms // 1000 >= 100_000_000:
        assert parse_time(str(ms // 1000)) == ms // 1000 * 1000
