"""clean(): the shortcut for ordinary answers keeps exactly what the general path keeps, and counts alike."""

from __future__ import annotations

import numpy as np
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
