"""Property-based tests of the pure logic: window planning, interval state, merge/dedupe of chunks."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.client.models import Parameter, Points
from etl.config import parse_config
from etl.plan import PlanOptions, WorkUnit, plan
from etl.sinks.dataset import Replaced, replaced_mask
from etl.state import State, merge, subtract
from etl.timeutil import DAY_MS, HOUR_MS
from etl.transform import clean, to_table

T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
PARAMS = [Parameter(1001, "physical", 1), Parameter(1502, "calculated", 1)]


def config(raw_window="24h", aggregate_window="7d", overlap="0s"):
    return parse_config({
        "source": {"base_url": "http://x/api", "username": "u", "password": "p"},
        "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z", "overlap": overlap},
        "extract": {"raw_window": raw_window, "aggregate_window": aggregate_window},
        "sink": {"path": "unused"},
    })


times = st.integers(min_value=T0 - 40 * DAY_MS, max_value=T0 + 40 * DAY_MS)


@settings(max_examples=200, deadline=None)
@given(a=times, b=times, raw_window=st.sampled_from(["24h", "12h", "6h", "1h"]),
       aggregate_window=st.sampled_from(["1d", "7d", "30d"]))
def test_plan_covers_the_window_exactly_once(a, b, raw_window, aggregate_window):
    start, end = min(a, b), max(a, b) + 1
    cfg = config(raw_window, aggregate_window)
    slabs = plan(cfg, PARAMS, State(), PlanOptions(start, end))
    for series in ("raw", "average", "candles"):
        for param in PARAMS:
            units = sorted((u.start, u.end) for s in slabs for u in s.units if u.series == series and u.param == param)
            assert units[0][0] == start and units[-1][1] == end
            assert all(x[1] == y[0] for x, y in zip(units, units[1:], strict=False))  # no gap, no overlap
            if series == "raw":
                assert all(e - s <= DAY_MS for s, e in units)
                assert all((s // DAY_MS) == ((e - 1) // DAY_MS) for s, e in units)  # never across midnight
    for slab in slabs:
        assert all(slab.start <= u.start < u.end <= slab.end for u in slab.units)


intervals = st.lists(st.tuples(times, st.integers(1, 3 * DAY_MS)).map(lambda t: (t[0], t[0] + t[1])), max_size=12)


@given(intervals, st.randoms())
def test_state_intervals_merge_order_independently(items, rnd):
    shuffled = list(items)
    rnd.shuffle(shuffled)
    a, b = State(), State()
    for s, e in items:
        a.add(1, "raw", s, e)
    for s, e in shuffled:
        b.add(1, "raw", s, e)
    assert a.intervals(1, "raw") == b.intervals(1, "raw") == merge(items)
    merged = a.intervals(1, "raw")
    assert all(x[1] < y[0] for x, y in zip(merged, merged[1:], strict=False))  # disjoint, not even touching


@given(intervals)
def test_high_water_mark_never_moves_backwards(items):
    state = State()
    last = None
    for s, e in items:
        state.add(7, "average", s, e)
        mark = state.high_water(7, "average")
        assert last is None or mark >= last
        last = mark


@given(intervals, times, st.integers(1, 5 * DAY_MS))
def test_planned_gaps_plus_covered_are_the_window(items, start, length):
    covered = merge(items)
    window = (start, start + length)
    gaps = subtract(window, covered)
    clipped = [(max(s, window[0]), min(e, window[1])) for s, e in covered if s < window[1] and e > window[0]]
    assert merge(gaps + clipped) == [window]
    assert all(not (g[0] < c[1] and c[0] < g[1]) for g in gaps for c in clipped)


@given(st.lists(st.integers(0, DAY_MS - 1), max_size=80), st.lists(st.integers(0, 3), min_size=1, max_size=4),
       st.randoms())
def test_merge_of_overlapping_chunks_is_idempotent_and_order_independent(stamps, repeats, rnd):
    """Whatever chunking, duplication and order the server uses, the cleaned table is the same."""
    unit = WorkUnit(PARAMS[0], "raw", T0, T0 + DAY_MS)
    ts = np.array(sorted(set(stamps)), dtype=np.int64) + T0
    values = ts.astype(np.float64) / 1000
    reference = to_table("raw", [clean(unit, Points(ts, values), Counter())])
    noisy_ts = np.concatenate([ts] * (1 + sum(repeats)))
    noisy_values = noisy_ts.astype(np.float64) / 1000
    order = list(range(len(noisy_ts)))
    rnd.shuffle(order)
    shuffled = Points(noisy_ts[order], noisy_values[order])
    once = to_table("raw", [clean(unit, shuffled, Counter())])
    assert once.equals(reference)
    again = to_table("raw", [clean(unit, Points(once["ts"].cast(pa.int64()).to_numpy(), once["value"].to_numpy()),
                                   Counter())])
    assert again.equals(reference)


@given(st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 100)), max_size=60),
       st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 100), st.integers(0, 60)), max_size=6))
def test_replaced_mask_matches_a_plain_loop(rows, ranges):
    table = pa.table({
        "param_id": pa.array([p for p, _ in rows], pa.int64()),
        "ts": pa.array([T0 + t * HOUR_MS for _, t in rows], pa.timestamp("ms", tz="UTC")),
    })
    replaced = [Replaced(p, 1, T0 + s * HOUR_MS, T0 + (s + n) * HOUR_MS) for p, s, n in ranges]
    want = [any(r.param_id == p and r.start <= T0 + t * HOUR_MS < r.end for r in replaced) for p, t in rows]
    assert replaced_mask(table, replaced).tolist() == want
