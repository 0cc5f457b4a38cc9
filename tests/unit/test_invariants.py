"""Property-based tests of the three promises of issue 4, where test_properties.py leaves gaps: planning
over any prior state, merging overlapping chunks in the sink, and checkpoints only ever growing."""

from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.model import SCHEMAS, ParamKind, Series, Window, Windows, bucket_of
from etl.pipeline.plan import PlanOptions
from etl.sinks import Layout, ParquetFormat, SlabWriter
from etl.state import Coverage, StateStore
from etl.storage.files import Storage
from etl.timeutil import DAY_MS, HOUR_MS
from tests.unit.test_properties import PARAMS, T0, config, intervals, merge, plan, times


def add(state: Coverage, param_id: int, series: str, start: int, end: int) -> None:
    state.add(
        Windows.of(Series(series), [Window(param_id, 1, ParamKind.PHYSICAL, Series(series), start, end)])
    )


def covers(intervals: list[tuple[int, int]], point: int) -> bool:
    return any(s <= point < e for s, e in intervals)


@settings(max_examples=150, deadline=None)
@given(a=times, b=times, prior=intervals, raw_window=st.sampled_from(["24h", "6h", "1h"]))
def test_plan_over_any_prior_state_fetches_each_gap_exactly_once(a, b, prior, raw_window):
    """With checkpoints already covering some of the window (and no overlap re-read), the planned units
    and the covered intervals tile [start, end): every instant exactly once, raw units within a UTC day."""
    start, end = min(a, b), max(a, b) + 1
    state = Coverage()
    for s, e in prior:
        add(state, PARAMS[0].id, "raw", s, e)
        add(state, PARAMS[1].id, "candles", s, e)
    slabs = plan(config(raw_window), PARAMS, state, PlanOptions(start, end))
    for param in PARAMS:
        for series in ("raw", "average", "candles"):
            units = sorted(
                (u.start, u.end) for s in slabs for u in s.windows if u.param == param and u.series == series
            )
            covered = [
                (max(s, start), min(e, end))
                for s, e in state.intervals(param.id, series)
                if s < end and e > start
            ]
            assert all(x[1] <= y[0] for x, y in zip(units, units[1:], strict=False))  # units never overlap
            assert not any(
                s < ce and cs < e for s, e in units for cs, ce in covered
            )  # nor re-fetch covered time
            assert merge(units + covered) == [(start, end)]  # and together they are the window
            if series == "raw":
                assert all(s // DAY_MS == (e - 1) // DAY_MS for s, e in units)


@settings(max_examples=150, deadline=None)
@given(a=times, b=times, prior=intervals, overlap=st.sampled_from(["1h", "6h", "2d"]))
def test_overlap_re_reads_only_behind_the_high_water_mark(a, b, prior, overlap):
    """The late-data overlap adds at most `overlap` before the high-water mark, and still no unit twice."""
    start, end = min(a, b), max(a, b) + 1
    state = Coverage()
    for s, e in prior:
        add(state, PARAMS[0].id, "raw", s, e)
    cfg = config(overlap=overlap)
    units = sorted(
        (u.start, u.end)
        for s in plan(cfg, PARAMS[:1], state, PlanOptions(start, end))
        for u in s.windows
        if u.series == "raw"
    )
    assert all(x[1] <= y[0] for x, y in zip(units, units[1:], strict=False))
    mark = state.high_water(PARAMS[0].id, "raw")
    covered = state.intervals(PARAMS[0].id, "raw")
    re_read = [(max(s, cs), min(e, ce)) for s, e in units for cs, ce in covered if s < ce and cs < e]
    assert all(mark is not None and mark - cfg.window.overlap <= s and e <= mark for s, e in re_read)


# -- the sink: overlapping chunks, any order --------------------------------------------------------

SOURCE_TS = np.sort(np.unique(np.random.default_rng(0).integers(T0, T0 + 3 * DAY_MS, 400)))


def source_rows(param_id: int, start: int, end: int) -> pa.Table:
    """The 'server's' points of one parameter in [start, end): a fixed set, values a function of time."""
    ts = SOURCE_TS[(start <= SOURCE_TS) & (end > SOURCE_TS)]
    return pa.table(
        {
            "source": ["s"] * len(ts),
            "object_id": np.full(len(ts), 1, np.int64),
            "param_id": np.full(len(ts), param_id, np.int64),
            "kind": pa.array(["physical"] * len(ts)),
            "ts": pa.array(ts, SCHEMAS["raw"].field("ts").type),
            "value": ts.astype(np.float64) / 1000 + param_id,
        },
        schema=SCHEMAS["raw"],
    )


chunk = st.tuples(st.sampled_from([1001, 1002]), st.integers(0, 71), st.integers(1, 30)).map(
    lambda c: (c[0], T0 + c[1] * HOUR_MS, T0 + min(72, c[1] + c[2]) * HOUR_MS)
)


def write_all(chunks: list[tuple[int, int, int]], folder: str) -> pa.Table:
    """Each chunk as a slab of its own (one window, cut at midnights as the plan cuts raw slabs)."""
    storage, layout = Storage(folder), Layout(Series.RAW, ["date"], ".parquet", "s", buckets=2)
    for param_id, start, end in chunks:
        for day_start in range(start - start % DAY_MS, end, DAY_MS):
            s, e = max(start, day_start), min(end, day_start + DAY_MS)
            writer = SlabWriter(storage, ParquetFormat(), layout, bucket_of(param_id, 2))
            windows = Windows.of(Series.RAW, [Window(param_id, 1, ParamKind.PHYSICAL, Series.RAW, s, e)])
            writer.write(source_rows(param_id, s, e), windows)
            writer.finish()
    if not storage.find("raw"):
        return SCHEMAS["raw"].empty_table()
    # as readers do: hidden names (temp files) are not data
    table = (
        ds.dataset(f"{folder}/raw", format="parquet", partitioning="hive").to_table().drop_columns(["date"])
    )
    return table.sort_by([("param_id", "ascending"), ("ts", "ascending")])


@settings(max_examples=25, deadline=None)
@given(st.lists(chunk, min_size=1, max_size=6), st.randoms())
def test_sink_merge_of_overlapping_chunks_is_idempotent_and_order_independent(chunks, rnd):
    """Writing overlapping (parameter, window) chunks, in any order and any number of times, leaves
    exactly the source's points of their union: never a point twice, never one lost."""
    shuffled = chunks + rnd.sample(chunks, len(chunks))  # every chunk again, in another order
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        once, twice = write_all(chunks, one), write_all(shuffled, two)
    want = pa.concat_tables(
        [
            source_rows(p, s, e)
            for p in (1001, 1002)
            for s, e in merge([(s, e) for q, s, e in chunks if q == p])
        ]
    ).sort_by([("param_id", "ascending"), ("ts", "ascending")])
    assert once.select(want.column_names).equals(want)
    assert twice.select(want.column_names).equals(want)


# -- checkpoints only grow -------------------------------------------------------------------------


@given(intervals, intervals)
def test_a_checkpoint_never_moves_backwards(first, later):
    """Whatever is added later, and through a commit and load, the covered time only grows."""
    state = Coverage()
    for s, e in first:
        add(state, 3, "raw", s, e)
    before = state.intervals(3, "raw")
    with tempfile.TemporaryDirectory() as folder:
        store = StateStore(Storage(folder))
        store.load()
        store.commit(
            Windows.of(Series.RAW, [Window(3, 1, ParamKind.PHYSICAL, Series.RAW, s, e) for s, e in first])
        )
        for s, e in later:
            store.commit(Windows.of(Series.RAW, [Window(3, 1, ParamKind.PHYSICAL, Series.RAW, s, e)]))
            state = store.load()
            store.compact(state)
            after = state.intervals(3, "raw")
            assert all(any(a <= s0 and e0 <= b for a, b in after) for s0, e0 in before)
            mark_before = before[-1][1] if before else None
            assert mark_before is None or after[-1][1] >= mark_before
            before = after
