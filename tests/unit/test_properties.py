"""Property-based tests of the pure logic: window planning (over any prior state), interval state and
checkpoints (only ever growing), merge/dedupe of overlapping chunks in clean() and in the partition writer."""

from __future__ import annotations

import pickle
import tempfile
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.client.models import Points
from etl.config import parse_config
from etl.model import (
    PARAM_KINDS,
    SCHEMAS,
    SERIES,
    Param,
    ParamKind,
    Params,
    Series,
    Window,
    Windows,
    batches,
    bucket_of,
    cut,
    cut_columns,
)
from etl.pipeline.clean import clean, to_table
from etl.pipeline.counts import Counts
from etl.pipeline.plan import Fleet, Plan, PlanOptions, needed, spans_for
from etl.sinks import Layout, ParquetFormat, SlabWriter
from etl.sinks.layout import LEGACY_BUCKETS
from etl.sinks.rewrite import Ranges
from etl.state import Coverage, StateStore
from etl.state.store import segment, windows_of
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS, HOUR_MS

T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
PARAMS = [Param(1001, 1, ParamKind.PHYSICAL), Param(1502, 1, ParamKind.CALCULATED)]


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The reference: overlapping or touching intervals merged, empty ones dropped."""
    out: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[0] < i[1]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def covered(items, param_id: int = 1, series: Series = Series.RAW) -> Coverage:
    coverage = Coverage()
    coverage.add(
        Windows.of(series, (Window(param_id, 1, ParamKind.PHYSICAL, series, s, e) for s, e in items))
    )
    return coverage


def plan(cfg, params, coverage: Coverage, options: PlanOptions) -> list:
    options = PlanOptions(options.start, options.end, options.full_refresh, cfg.window.overlap)
    spans = spans_for(cfg.extract.raw_window, cfg.extract.aggregate_window)
    return list(Plan(Fleet(Params.of(params), LEGACY_BUCKETS), coverage, options, cfg.series, spans).slabs())


def config(raw_window="24h", aggregate_window="7d", overlap="0s"):
    return parse_config(
        {
            "source": {"base_url": "http://x/sem-restservices", "username": "u", "password": "p"},
            "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z", "overlap": overlap},
            "extract": {"raw_window": raw_window, "aggregate_window": aggregate_window},
            "sink": {"path": "unused"},
        }
    )


times = st.integers(min_value=T0 - 40 * DAY_MS, max_value=T0 + 40 * DAY_MS)


@settings(max_examples=200, deadline=None)
@given(
    a=times,
    b=times,
    raw_window=st.sampled_from(["24h", "12h", "6h", "1h"]),
    aggregate_window=st.sampled_from(["1d", "7d", "30d"]),
)
def test_plan_covers_the_window_exactly_once(a, b, raw_window, aggregate_window):
    start, end = min(a, b), max(a, b) + 1
    cfg = config(raw_window, aggregate_window)
    slabs = plan(cfg, PARAMS, Coverage(), PlanOptions(start, end))
    for series in SERIES:
        for param in PARAMS:
            units = sorted(
                (u.start, u.end) for s in slabs for u in s.windows if u.series == series and u.param == param
            )
            assert units[0][0] == start and units[-1][1] == end
            assert all(x[1] == y[0] for x, y in zip(units, units[1:], strict=False))  # no gap, no overlap
            if series == "raw":  # one request each: across the last midnight only, when it fits one
                last_midnight = (end - 1) // DAY_MS * DAY_MS
                assert all(e - s <= cfg.extract.raw_window for s, e in units)
                assert all((s // DAY_MS) == ((e - 1) // DAY_MS) or s < last_midnight < e for s, e in units)
    for slab in slabs:
        assert all(
            slab.start <= u.start < u.end <= slab.end and u.series == slab.series for u in slab.windows
        )


@settings(max_examples=150, deadline=None)
@given(
    a=times,
    b=times,
    prior=st.lists(st.tuples(times, times), max_size=4),
    raw_window=st.sampled_from(["24h", "6h"]),
)
def test_a_plan_is_newest_first_and_counts_what_it_makes(a, b, prior, raw_window):
    """Slabs come fresh first, newest first: the spans that hold new data by their ends, then history by
    the starts of its spans (each parameter's newest data before any of its history, and a backfill's week
    of aggregates after the days inside it); no two slabs of a series and bucket share a day (they are
    written independently); the summary counts exactly the slabs and windows handed out."""
    start, end = min(a, b), max(a, b) + 1
    state = Coverage()
    for x, y in prior:
        add(state, PARAMS[0].id, "raw", min(x, y), max(x, y))
    cfg = config(raw_window)
    spans = spans_for(cfg.extract.raw_window, cfg.extract.aggregate_window)
    made = Plan(Fleet(Params.of(PARAMS), LEGACY_BUCKETS), state, PlanOptions(start, end), cfg.series, spans)
    summary, windows = made.summary(), made.windows
    slabs = list(made.slabs())
    fresh = {(s.series, s.start) for s in slabs if s.history is not None and not s.history.all()}
    order = [(0, -s.end) if (s.series, s.start) in fresh else (1, -s.start) for s in slabs]
    assert order == sorted(order)
    days = [
        (s.series, s.bucket, d) for s in slabs for d in range(s.start // DAY_MS, (s.end - 1) // DAY_MS + 1)
    ]
    assert len(days) == len(set(days))
    assert windows == sum(len(s.windows) for s in slabs)
    for series, figures in summary.items():
        mine = [s for s in slabs if s.series == series]
        assert figures["slabs"] == len(mine) and figures["windows"] == sum(len(s.windows) for s in mine)


def test_a_plan_hands_its_slabs_out_once_and_its_summary_stays():
    cfg = config("6h")
    spans = spans_for(cfg.extract.raw_window, cfg.extract.aggregate_window)
    made = Plan(
        Fleet(Params.of(PARAMS), LEGACY_BUCKETS),
        Coverage(),
        PlanOptions(T0, T0 + 10 * DAY_MS),
        cfg.series,
        spans,
    )
    before, windows = made.summary(), made.windows
    slabs = list(made.slabs())
    assert windows == sum(len(s.windows) for s in slabs) == 2 * (40 + 2 + 2)  # 10 days of 6 h; 2 weeks each
    assert made.summary() == before and made.windows == windows
    assert list(made.slabs()) == []  # each series' work was let go with its last slab


intervals = st.lists(
    st.tuples(times, st.integers(1, 3 * DAY_MS)).map(lambda t: (t[0], t[0] + t[1])), max_size=12
)


@given(intervals, st.randoms())
def test_state_intervals_merge_order_independently(items, rnd):
    shuffled = list(items)
    rnd.shuffle(shuffled)
    a, b = covered([]), covered(shuffled)
    for item in items:  # one at a time, as slabs commit
        a.add(Windows.of(Series.RAW, [Window(1, 1, ParamKind.PHYSICAL, Series.RAW, *item)]))
    assert a.intervals(1, "raw") == b.intervals(1, "raw") == merge(items)
    merged = a.intervals(1, "raw")
    assert all(x[1] < y[0] for x, y in zip(merged, merged[1:], strict=False))  # disjoint, not even touching


@given(intervals)
def test_high_water_mark_never_moves_backwards(items):
    state = Coverage()
    last = None
    for s, e in items:
        state.add(Windows.of(Series.AVERAGE, [Window(7, 1, ParamKind.PHYSICAL, Series.AVERAGE, s, e)]))
        mark = state.high_water(7, "average")
        assert last is None or mark >= last
        last = mark


@given(intervals, times, st.integers(1, 5 * DAY_MS))
def test_planned_gaps_plus_covered_are_the_window(items, start, length):
    have = merge(items)
    window = (start, start + length)
    _, gap_s, gap_e = needed(covered(items), Series.RAW, np.array([1]), PlanOptions(*window))
    gaps = list(zip(gap_s.tolist(), gap_e.tolist(), strict=True))
    clipped = [(max(s, window[0]), min(e, window[1])) for s, e in have if s < window[1] and e > window[0]]
    assert merge(gaps + clipped) == [window]
    assert all(not (g[0] < c[1] and c[0] < g[1]) for g in gaps for c in clipped)


@given(
    st.lists(st.integers(0, DAY_MS - 1), max_size=80),
    st.lists(st.integers(0, 3), min_size=1, max_size=4),
    st.randoms(),
)
def test_merge_of_overlapping_chunks_is_idempotent_and_order_independent(stamps, repeats, rnd):
    """Whatever chunking, duplication and order the server uses, the cleaned table is the same."""
    unit = Window(1001, 1, ParamKind.PHYSICAL, Series.RAW, T0, T0 + DAY_MS)
    ts = np.array(sorted(set(stamps)), dtype=np.int64) + T0
    values = ts.astype(np.float64) / 1000
    reference = to_table(Series.RAW, [clean(unit, Points(ts, values), Counts())], "s")
    noisy_ts = np.concatenate([ts] * (1 + sum(repeats)))
    noisy_values = noisy_ts.astype(np.float64) / 1000
    order = list(range(len(noisy_ts)))
    rnd.shuffle(order)
    shuffled = Points(noisy_ts[order], noisy_values[order])
    once = to_table(Series.RAW, [clean(unit, shuffled, Counts())], "s")
    assert once.equals(reference)
    again = to_table(
        Series.RAW,
        [clean(unit, Points(once["ts"].cast(pa.int64()).to_numpy(), once["value"].to_numpy()), Counts())],
        "s",
    )
    assert again.equals(reference)


@given(
    st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 100)), max_size=60),
    st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 100), st.integers(0, 60)), max_size=6),
)
def test_replaced_mask_matches_a_plain_loop(rows, ranges):
    table = pa.table(
        {
            "param_id": pa.array([p for p, _ in rows], pa.int64()),
            "ts": pa.array([T0 + t * HOUR_MS for _, t in rows], pa.timestamp("ms", tz="UTC")),
        }
    )
    replaced = [
        Window(p, 1, ParamKind.PHYSICAL, Series.RAW, T0 + s * HOUR_MS, T0 + (s + n) * HOUR_MS)
        for p, s, n in ranges
    ]
    want = [any(r.param_id == p and r.start <= T0 + t * HOUR_MS < r.end for r in replaced) for p, t in rows]
    assert Ranges.of(Windows.of(Series.RAW, replaced)).mask(table).tolist() == want


# (start, length) pairs, not the (start, end) of `intervals` above
lengths = st.lists(st.tuples(st.integers(0, 10 * DAY_MS), st.integers(1, 3 * DAY_MS)), max_size=20)


@given(lengths, st.sampled_from([HOUR_MS, 6 * HOUR_MS, DAY_MS]))
def test_cutting_many_intervals_at_once_cuts_each_as_one_would(items, step):
    starts = np.array([s for s, _ in items], np.int64)
    ends = starts + np.array([n for _, n in items], np.int64)
    index, a, b = cut_columns(starts, ends, step)
    expected = [
        (i, x, y)
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True))
        for x, y in cut(s, e, step)
    ]
    assert list(zip(index.tolist(), a.tolist(), b.tolist(), strict=True)) == expected


@given(
    st.lists(
        st.tuples(
            st.integers(1, 50),
            st.integers(1, 3),
            st.sampled_from(PARAM_KINDS),
            st.integers(0, 5),
            st.integers(1, 4),
        ),
        max_size=40,
    ),
    st.integers(1, 8),
)
def test_column_wise_windows_are_the_windows_they_were_made_of(rows, size):
    rows.sort(key=lambda r: r[0])
    made = [Window(p, o, k, Series.RAW, s * HOUR_MS, (s + n) * HOUR_MS) for p, o, k, s, n in rows]
    windows = Windows.of(Series.RAW, made)
    assert list(windows) == made and [windows[i] for i in range(len(made))] == made
    assert list(pickle.loads(pickle.dumps(windows))) == made
    assert list(windows[np.arange(len(made))[::2]]) == made[::2]
    # A slab's batches: whole parameters, cut at the first parameter boundary at or past `size` windows.
    spans = batches(windows.param_id, size)
    assert [w for lo, hi in spans for w in made[lo:hi]] == made
    for lo, hi in spans:
        assert lo == 0 or made[lo - 1].param_id != made[lo].param_id
        last = next(
            i for i in range(hi - 1, lo - 1, -1) if i == lo or made[i - 1].param_id != made[i].param_id
        )
        assert last - lo < size and (hi - lo >= size or hi == len(made))
    # The checkpoint log gives them back (object and kind aside).
    assert Counter(windows_of(segment(windows))) == Counter(
        w._replace(object_id=0, kind=ParamKind.PHYSICAL) for w in made
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(1, 300), max_size=40), max_size=30), st.integers(1, 16))
def test_seen_ids_are_told_apart_as_a_set_would(pages, latest):
    from etl.pipeline.discover import _Seen

    seen, reference = _Seen(), set()
    seen.LATEST = latest  # merged into the sorted array often
    for page in pages:
        fresh = seen.new(np.array(page, np.int64)).tolist()
        want = []
        for p in page:
            want.append(p not in reference)
            reference.add(p)
        assert fresh == want


def test_params_keep_the_first_of_an_id_sorted_and_pick_a_shard():
    from etl.model import Shard

    params = Params.of(
        [Param(9, 1, ParamKind.SIGNAL), Param(3, 2, ParamKind.PHYSICAL), Param(9, 5, ParamKind.CALCULATED)]
    )
    assert list(params) == [Param(3, 2, ParamKind.PHYSICAL), Param(9, 1, ParamKind.SIGNAL)]
    shards = [Shard(i, 3) for i in range(3)]
    assert sorted(
        p.id
        for s in shards
        for p in Params.of(Param(i, 0, ParamKind.PHYSICAL) for i in range(50)).of_shard(s)
    ) == list(range(50))
    assert all(s.contains(p.id) for s in shards for p in Params.of(PARAMS).of_shard(s))


# -- planning over any prior state, the sink's merge of overlapping chunks, checkpoints through the store
# (the gaps test_properties.py left: issue 4's three promises, once in test_invariants.py)


def add(state: Coverage, param_id: int, series: str, start: int, end: int) -> None:
    state.add(
        Windows.of(Series(series), [Window(param_id, 1, ParamKind.PHYSICAL, Series(series), start, end)])
    )


@settings(max_examples=150, deadline=None)
@given(a=times, b=times, prior=intervals, raw_window=st.sampled_from(["24h", "6h", "1h"]))
def test_plan_over_any_prior_state_fetches_each_gap_exactly_once(a, b, prior, raw_window):
    """With checkpoints already covering some of the window (and no overlap re-read), the planned units
    and the covered intervals tile [start, end): every instant exactly once, raw units one request each
    (within a UTC day, but for a tail across the last midnight)."""
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
            if (
                series == "raw"
            ):  # a unit is one request: at most the raw window, across the last midnight only
                unit = config(raw_window).extract.raw_window
                last_midnight = (end - 1) // DAY_MS * DAY_MS
                assert all(e - s <= unit for s, e in units)
                assert all(s // DAY_MS == (e - 1) // DAY_MS or s < last_midnight < e for s, e in units)


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
