"""clean(): the shortcut for ordinary answers keeps exactly what the general path keeps, and counts alike."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.client.models import Points
from etl.model import ParamKind, Series, Window
from etl.pipeline.clean import _clean_any, clean

UNIT = Window(1001, 1, ParamKind.PHYSICAL, Series.RAW, 100, 200)
stamps = st.lists(st.integers(80, 220), max_size=40)


@settings(max_examples=300, deadline=None)
@given(stamps, st.booleans(), st.data())
def test_shortcut_matches_the_general_path(ts, ordered, data):
    ts = sorted(set(ts)) if ordered else ts
    values = data.draw(
        st.lists(st.one_of(st.floats(-5, 5), st.just(float("nan"))), min_size=len(ts), max_size=len(ts))
    )
    points = Points(ts=np.array(ts, np.int64), value=np.array(values, np.float64))
    fast_warnings, slow_warnings = Counter(), Counter()
    fast, slow = clean(UNIT, points, fast_warnings), _clean_any(UNIT, points, slow_warnings)
    assert fast.ts.tolist() == slow.ts.tolist()
    assert np.array_equal(fast.values["value"], slow.values["value"])
    assert fast_warnings == slow_warnings
