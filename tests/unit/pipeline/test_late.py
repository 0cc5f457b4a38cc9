"""Late data: what arrived (state.arrivals), the tails and probes a run plans (pipeline.late), and the
late figures of a raw day (quality.rows), without a server."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl.model import PARAM_KINDS, SCHEMAS, ParamKind, Series, Windows
from etl.pipeline.late import (
    BUCKET_MS,
    LateOptions,
    OpenTails,
    block_of,
    fingerprint,
    hashes,
    new_prints,
    plan_probes,
    revised_blocks,
    tails,
)
from etl.quality.rows import Known, late_figures
from etl.sinks.rewrite import Ranges
from etl.state.arrivals import NONE, Arrivals, Rows
from etl.state.coverage import Coverage, key_of
from etl.state.store import StateStore
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS, HOUR_MS

T0 = 20_000 * DAY_MS  # a UTC midnight
IDS = np.array([1, 2, 3, 4], np.int64)


def options(**changes: object) -> LateOptions:
    base = dict(start=T0 - 30 * DAY_MS, end=T0 + 10 * HOUR_MS, late_max=7 * DAY_MS, revisions=0)
    base.update({"series": (Series.RAW,), **changes})
    base.setdefault("now", base["end"])
    return LateOptions(**base)  # type: ignore[arg-type]


def covered(series: Series, end: int, ids: np.ndarray = IDS) -> Coverage:
    return Coverage.of(key_of(ids, series), np.full(len(ids), T0 - 30 * DAY_MS), np.full(len(ids), end))


def test_newest_keeps_the_latest_stamp_of_each_key() -> None:
    a = Arrivals()
    a.add_newest(key_of(np.array([2, 1, 2]), Series.RAW), np.array([5, 7, 3]))
    assert a.newest_of(Series.RAW, np.array([1, 2, 3])).tolist() == [7, 5, NONE]
    assert a.newest_of(Series.AVERAGE, np.array([1])).tolist() == [NONE]


def test_late_rows_add_up_and_prints_keep_the_last() -> None:
    a = Arrivals()
    a.add_late(Rows(np.array([1, 1]), np.array([T0, T0]), (np.array([3, 4]), np.array([10, 50]))))
    a.add_late(Rows(np.array([1]), np.array([T0]), (np.array([2]), np.array([20]))))
    a.add_prints(Rows(np.array([1]), np.array([T0]), (np.array([5]), np.array([111]))))
    a.add_prints(Rows(np.array([1]), np.array([T0]), (np.array([9]), np.array([222]))))
    assert a.late.values[0].tolist() == [9] and a.late.values[1].tolist() == [50]
    assert a.prints.values[0].tolist() == [9] and a.prints.values[1].tolist() == [222]
    back = Arrivals.from_parquet(a.to_parquet())
    assert back.late.values[0].tolist() == [9] and back.prints.values[1].tolist() == [222]


def test_a_store_keeps_arrivals_through_its_log_and_its_base(tmp_path) -> None:
    store = StateStore(Storage(str(tmp_path)))
    store.load()
    update = Arrivals()
    update.add_newest(key_of(IDS, Series.RAW), np.array([10, 20, 30, 40]))
    from etl.model import Windows

    zeros = np.zeros(4, np.int64)
    windows = Windows(Series.RAW, IDS, zeros, zeros, zeros, np.full(4, 50))
    with store.lock():
        store.commit(windows, arrivals=update)
    again = StateStore(Storage(str(tmp_path)))
    again.load()
    assert again.arrivals.newest_of(Series.RAW, IDS).tolist() == [10, 20, 30, 40]
    with again.lock():
        again.compact(again.load(), force=True)
    third = StateStore(Storage(str(tmp_path)))
    third.load()
    assert third.arrivals.newest_of(Series.RAW, IDS).tolist() == [10, 20, 30, 40]


def test_checkpoints_from_before_arrivals_read_nothing_again(tmp_path) -> None:
    """A store whose segments carry no arrivals: each parameter counts as punctual up to its checkpoint."""
    import orjson

    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "000000000001.json").write_bytes(
        orjson.dumps({"version": 2, "windows": [["raw", T0, T0 + HOUR_MS, IDS.tolist()]]})
    )
    store = StateStore(Storage(str(tmp_path)))
    coverage = store.load()
    assert store.arrivals.newest_of(Series.RAW, IDS).tolist() == [T0 + HOUR_MS - 1] * 4
    short, long = tails(
        coverage, store.arrivals, Series.RAW, IDS, options(end=T0 + 2 * HOUR_MS, now=T0 + 2 * HOUR_MS)
    )
    assert not len(short[0]) and not len(long[0])


def test_tails_start_after_the_newest_point_and_go_to_the_checkpoint() -> None:
    coverage = covered(Series.RAW, T0 + 9 * HOUR_MS)
    a = Arrivals()
    # 1 punctual, 2 three hours late, 3 quiet for three days, 4 never sent anything
    a.add_newest(
        key_of(IDS[:3], Series.RAW), np.array([T0 + 9 * HOUR_MS - 1, T0 + 6 * HOUR_MS, T0 - 3 * DAY_MS])
    )
    short, long = tails(coverage, a, Series.RAW, IDS, options())
    assert short[0].tolist() == [2]
    assert short[1].tolist() == [T0 + 6 * HOUR_MS + 1] and short[2].tolist() == [T0 + 9 * HOUR_MS]
    assert long[0].tolist() == [3, 4]
    assert long[1].tolist() == [T0 - 3 * DAY_MS + 1, T0 + 10 * HOUR_MS - 7 * DAY_MS]  # 4: late_max back


def test_aggregate_tails_read_the_newest_half_hour_again() -> None:
    coverage = covered(Series.AVERAGE, T0 + 9 * HOUR_MS, IDS[:1])
    a = Arrivals()
    a.add_newest(key_of(IDS[:1], Series.AVERAGE), np.array([T0 + 6 * HOUR_MS]))
    short, _ = tails(coverage, a, Series.AVERAGE, IDS[:1], options(series=(Series.AVERAGE,)))
    assert short[1].tolist() == [T0 + 6 * HOUR_MS]


def test_late_max_off_reads_no_tail() -> None:
    coverage = covered(Series.RAW, T0 + 9 * HOUR_MS)
    short, long = tails(coverage, Arrivals(), Series.RAW, IDS, options(late_max=0))
    assert not len(short[0]) and not len(long[0])


def test_probes_cover_long_tails_and_calculated_parameters_revisions() -> None:
    coverage = covered(Series.RAW, T0 + 9 * HOUR_MS)
    a = Arrivals()
    a.add_newest(
        key_of(IDS, Series.RAW),
        np.array([T0 + 9 * HOUR_MS - 1, T0 + 9 * HOUR_MS - 1, T0 - 3 * DAY_MS, T0 + 9 * HOUR_MS - 5]),
    )
    kinds = np.array(
        [
            PARAM_KINDS.index(k)
            for k in (ParamKind.PHYSICAL, ParamKind.CALCULATED, ParamKind.PHYSICAL, ParamKind.PHYSICAL)
        ],
        np.int8,
    )
    _, _, probes = plan_probes(coverage, a, IDS, kinds, options(revisions=6 * HOUR_MS))
    assert probes.param_id.tolist() == [2, 3]
    block = block_of(6 * HOUR_MS)
    assert probes.start.tolist() == [(T0 + 4 * HOUR_MS) // block * block, T0 - 3 * DAY_MS + 1]


def test_a_revised_block_is_found_by_its_fingerprint() -> None:
    block = block_of(6 * HOUR_MS)
    ts = np.arange(T0, T0 + 6 * HOUR_MS, BUCKET_MS)
    before = (ts, hashes(ts, np.arange(len(ts), dtype=np.float64)))
    newest = T0 + 5 * HOUR_MS + 10 * 60_000  # in the last half-hour
    prints = new_prints({7: before}, {7: newest}, block, T0, T0 + 6 * HOUR_MS)
    # blocks up to the newest point's half-hour, then that half-hour's own print
    assert prints.at.tolist() == [*range(T0, T0 + 5 * HOUR_MS, block), T0 + 5 * HOUR_MS + 1]
    assert revised_blocks(prints, 7, before, block, T0, newest) == ([], 0)
    values = np.arange(len(ts), dtype=np.float64)
    values[5] += 0.5  # the sixth half-hour, in the second block
    after = (ts, hashes(ts, values))
    assert revised_blocks(prints, 7, after, block, T0, newest) == ([(T0 + block, T0 + 2 * block)], 1)
    assert fingerprint(after, T0, T0 + block) == fingerprint(before, T0, T0 + block)


def test_points_after_the_newest_in_its_half_hour_are_read_again_up_to_it_only() -> None:
    block = block_of(6 * HOUR_MS)
    ts = np.arange(T0, T0 + 6 * HOUR_MS, BUCKET_MS)
    newest = T0 + 5 * HOUR_MS + 10 * 60_000
    before = (ts, hashes(ts, np.zeros(len(ts))))
    prints = new_prints({7: before}, {7: newest}, block, T0, T0 + 6 * HOUR_MS)
    values = np.zeros(len(ts))
    values[-2] = 1.0  # the newest point's half-hour changed: late points after it, or a revision before
    spans, revised = revised_blocks(prints, 7, (ts, hashes(ts, values)), block, T0, newest)
    assert spans == [(T0 + 5 * HOUR_MS, newest + 1)] and revised == 0


def test_a_parameters_prints_are_replaced_as_a_whole() -> None:
    a = Arrivals()
    a.add_prints(Rows(np.array([1, 1, 2]), np.array([0, 10, 0]), (np.array([5, 5, 5]), np.array([1, 2, 3]))))
    a.add_prints(Rows(np.array([1]), np.array([20]), (np.array([9]), np.array([4]))))
    assert list(zip(a.prints.param_id.tolist(), a.prints.at.tolist(), strict=True)) == [(1, 20), (2, 0)]


def test_late_points_are_those_fetched_between_the_newest_and_the_checkpoint() -> None:
    schema = SCHEMAS[Series.RAW]
    ts = np.array([T0 + h * HOUR_MS for h in (1, 2, 3, 4, 5)])
    rows = pa.table(
        {
            "source": ["s"] * 5,
            "object_id": [1] * 5,
            "param_id": [9] * 5,
            "kind": ["physical"] * 5,
            "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
            "value": [1.0] * 5,
        },
        schema=schema,
    )
    ranges = Ranges(np.array([9]), np.array([T0 + 2 * HOUR_MS]), np.array([T0 + DAY_MS]))  # 2h.. fetched now
    prior = Rows(np.array([9]), np.array([T0]), (np.array([3]), np.array([60_000])))
    covered = (np.array([9]), np.array([T0]), np.array([T0 + 4 * HOUR_MS + 1]))
    known = Known(np.array([9]), np.array([T0 + 2 * HOUR_MS]), covered, prior)
    new_points, new_ms, points, ms = late_figures(rows, ranges, np.array([9]), known)
    assert new_points.tolist() == [2]  # 3h and 4h: after the newest (2h), in covered time
    assert new_ms.tolist() == [HOUR_MS + 1]
    assert points.tolist() == [5] and ms.tolist() == [HOUR_MS + 1]
    # The newest point at the covered time's end, or a first run's (nothing covered, nothing received):
    # nothing is late now, the day's earlier figures stay.
    nothing = (np.empty(0, np.int64),) * 3
    for newest, cover in ((T0 + 4 * HOUR_MS, covered), (NONE, nothing)):
        known = Known(np.array([9]), np.array([newest]), cover, prior)
        assert not known.gaps()
        new_points, new_ms, points, ms = late_figures(rows, ranges, np.array([9]), known)
        assert new_points.tolist() == [0] and new_ms.tolist() == [0]
        assert points.tolist() == [3] and ms.tolist() == [60_000]


def _done(pid: int, start: int, end: int) -> Windows:
    one = np.array([pid], np.int64)
    return Windows(Series.RAW, one, one, np.zeros(1, np.int8), np.array([start]), np.array([end]))


def _slab_newest(pid: int, newest: int) -> Arrivals:
    found = Arrivals()
    found.add_newest(key_of(np.array([pid]), Series.RAW), np.array([newest]))
    return found


def test_a_newer_point_waits_for_the_tails_before_it_and_comes_with_the_last():
    before = Arrivals()
    before.add_newest(key_of(np.array([7]), Series.RAW), np.array([10 * HOUR_MS]))
    # Two days of tail (yesterday's, then today's), fetched newest first.
    work = {
        Series.RAW: (
            np.array([7, 7]),
            np.array([10 * HOUR_MS + 1, DAY_MS]),
            np.array([DAY_MS, DAY_MS + HOUR_MS]),
        )
    }
    tails = OpenTails.of(work, before)
    today = _slab_newest(7, DAY_MS + 50 * 60_000)
    tails.settle(_done(7, DAY_MS, DAY_MS + HOUR_MS), today)
    # A stop now: the next run's tail starts where yesterday's does.
    assert today.newest_of(Series.RAW, np.array([7]))[0] == 10 * HOUR_MS
    yesterday = Arrivals()  # yesterday's tail brought nothing: its commit still carries today's point
    tails.settle(_done(7, 10 * HOUR_MS + 1, DAY_MS), yesterday)
    assert yesterday.newest_of(Series.RAW, np.array([7]))[0] == DAY_MS + 50 * 60_000


def test_tails_before_the_newest_point_hold_nothing_back():
    before = Arrivals()
    before.add_newest(key_of(np.array([7]), Series.RAW), np.array([10 * HOUR_MS]))
    work = {Series.RAW: (np.array([7]), np.array([HOUR_MS]), np.array([2 * HOUR_MS]))}  # a revised block
    tails = OpenTails.of(work, before)
    today = _slab_newest(7, 12 * HOUR_MS)
    tails.settle(_done(7, 11 * HOUR_MS, 13 * HOUR_MS), today)
    assert today.newest_of(Series.RAW, np.array([7]))[0] == 12 * HOUR_MS
