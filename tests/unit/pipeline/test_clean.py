"""clean(): the shortcut for ordinary answers keeps exactly what the general path keeps, and counts alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.client.models import Points
from etl.model import ParamKind, Series, Window
from etl.pipeline.clean import TimeFormatError, _clean_any, clean
from etl.pipeline.counts import Counts

UNIT = Window(1001, 1, ParamKind.PHYSICAL, Series.RAW, 100, 200)
stamps = st.lists(st.integers(80, 220), max_size=40)


@settings(max_examples=300, deadline=None)
@given(stamps, st.booleans(), st.data())
def test_shortcut_matches_the_general_path(ts, ordered, data):
    ts = sorted(set(ts)) if ordered else ts
    values = data.draw(
        st.lists(
            st.one_of(st.floats(-5, 5), st.sampled_from([float("nan"), float("inf"), -float("inf")])),
            min_size=len(ts),
            max_size=len(ts),
        )
    )
    points = Points(ts=np.array(ts, np.int64), value=np.array(values, np.float64))
    fast_warnings, slow_warnings = Counts(), Counts()
    outcomes = []
    for how, warnings in ((clean, fast_warnings), (_clean_any, slow_warnings)):
        try:
            outcomes.append(how(UNIT, points, warnings))
        except TimeFormatError as exc:  # stamps mostly outside the window, or mostly repeated
            outcomes.append(str(exc))
    fast, slow = outcomes
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    assert fast.ts.tolist() == slow.ts.tolist()
    assert np.array_equal(fast.values["value"], slow.values["value"])
    assert fast_warnings == slow_warnings


# The hourly schedule's short windows: 30-minute averages over two hours are 4 points.
T = 1_793_491_200_000  # 2026-11-01T00:00:00Z
TWO_HOURS = Window(1001, 1, ParamKind.PHYSICAL, Series.AVERAGE, T + 10 * 3_600_000, T + 12 * 3_600_000)
BUCKETS = TWO_HOURS.start + np.arange(4, dtype=np.int64) * 1_800_000


def _points(ts) -> Points:
    ts = np.asarray(ts, np.int64)
    return Points(ts=ts, value=np.arange(len(ts), dtype=np.float64))


@pytest.mark.parametrize(
    ("stamps", "seen"),
    [
        (BUCKETS // 1000, "epoch seconds"),  # the whole short answer
        (BUCKETS[:1] // 1000, "epoch seconds"),  # one point is enough
        (BUCKETS[:1] * 1000, "stamps that read as"),  # microseconds
        (np.r_[BUCKETS[:3], 12_345], "stamps that read as 1970"),  # one stamp of nothing among good ones
        (np.full(4, T), "dates without a time"),  # 2026-11-01 for each, outside the window
        (np.full(2, T), "dates without a time"),
    ],
)
def test_a_short_answer_in_another_time_format_fails_its_window(stamps, seen):
    with pytest.raises(TimeFormatError, match=seen):
        clean(TWO_HOURS, _points(stamps), Counts())


def test_dates_without_a_time_piled_inside_a_short_window_fail_it():
    window = Window(1001, 1, ParamKind.PHYSICAL, Series.AVERAGE, T, T + 2 * 3_600_000)
    with pytest.raises(TimeFormatError, match="4 points fall on 1 instant"):
        clean(window, _points(np.full(4, T)), Counts())


def test_a_point_just_outside_a_short_window_is_slack_dropped_and_counted():
    counts = Counts()
    stamps = np.r_[TWO_HOURS.start - 60_000, BUCKETS, TWO_HOURS.end]
    data = clean(TWO_HOURS, _points(stamps), counts)
    assert data.ts.tolist() == BUCKETS.tolist()
    assert counts.points_outside_window == 1  # the point at the end belongs to the next window


def test_a_point_sent_twice_in_a_short_answer_is_a_duplicate_not_a_time_format():
    counts = Counts()
    data = clean(TWO_HOURS, _points(np.r_[BUCKETS[:2], BUCKETS[1:]]), counts)
    assert data.ts.tolist() == BUCKETS.tolist()
    assert counts.conflicting_duplicates == 1  # values differ here (np.arange)
