"""The quality rows on their own (etl.quality): day_rows over unsorted feeds and parameters without rows,
the period inferred through gaps and jitter, a tracker compacting many small parts. The rows whole runs
keep are checked against the emulator in tests/e2e/test_quality.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from etl.model import ParamKind, Series, Window, Windows
from etl.quality.rows import day_rows, infer_period
from etl.sinks.rewrite import Ranges
from etl.timeutil import DAY_MS, HOUR_MS, to_ms
from tests.support.emulator import START

DAYS = [to_ms(START), to_ms(START) + DAY_MS]


def test_rows_of_unsorted_feeds_and_parameters_without_rows():
    """day_rows on its own: a parameter fed with no rows, one with one point, rows of parameters not fed."""
    day = DAYS[0]
    ts = np.array([day + 5_000, day + 65_000, day + 125_000, day + 10_000], np.int64)
    table = pa.table(
        {
            "param_id": [7, 7, 7, 8],
            "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
            "value": [1.0, 1.0, 2.0, 3.0],
        }
    )
    windows = [Window(p, 1, ParamKind.PHYSICAL, Series.RAW, day, day + DAY_MS) for p in (7, 8, 9)]
    rows = day_rows(
        table,
        Ranges.of(Windows.of(Series.RAW, windows)),
        {p: (1, "physical") for p in (7, 8, 9)},
        "s",
        (day, day + DAY_MS),
    ).to_pylist()
    seven, eight, nine = rows
    assert seven["points"] == 3 and seven["period_seconds"] == 60.0 and seven["expected_points"] == 1440
    assert seven["flatline_seconds"] == 60.0 and seven["longest_gap_seconds"] == 86400 - 125
    assert eight["points"] == 1 and eight["period_seconds"] is None and eight["completeness"] is None
    assert nine["points"] == 0 and nine["completeness"] == 0.0 and nine["longest_gap_seconds"] == 86400
    # a window starting inside the day (the run's first day): the span starts there
    late = day_rows(
        table.slice(0, 0),
        Ranges.of(Windows.of(Series.RAW, [windows[2]._replace(start=day + 12 * HOUR_MS)])),
        {9: (1, "physical")},
        "s",
        (day + 12 * HOUR_MS, day + 3 * DAY_MS),
    ).to_pylist()
    assert late[0]["span_seconds"] == 12 * 3600


def test_the_period_ignores_gaps_and_jitter():
    rng = np.random.default_rng(3)
    slots = np.arange(2000) * 60_000
    ts = np.sort(np.delete(slots, np.arange(300, 400)) + rng.integers(0, 30_000, 1900))  # 100 slots missing
    assert infer_period(ts) == pytest.approx(60_000, rel=0.002)
    assert infer_period(np.array([5])) is None


def test_a_tracker_fed_many_small_parts_gives_every_row_once_in_write_order():
    """Hundreds of one-parameter feeds (a long slab): compacted as they come, the same rows at the end."""
    from etl.model import Windows
    from etl.quality.writer import COMPACT_PARTS, QualityTracker

    day = DAYS[0]
    ids = list(range(100, 100 + 3 * COMPACT_PARTS + 5))
    windows = [Window(p, p % 7, ParamKind.PHYSICAL, Series.RAW, day, day + DAY_MS) for p in ids]
    tracker = QualityTracker(Windows.of(Series.RAW, windows), "s", (day, day + DAY_MS))
    for w in windows:
        ts = np.arange(3, dtype=np.int64) * 60_000 + day
        tracker(
            pa.table(
                {
                    "param_id": [w.param_id] * 3,
                    "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                    "value": [1.0, 2.0, 2.0],
                }
            ),
            Ranges.of(Windows.of(Series.RAW, [w])),
        )
    assert len(tracker.parts) == 3 + 5  # three compacted tables, then the five latest feeds
    table, replaced = tracker.result(by_object=False)
    assert tracker.rows == len(ids) and table.column("param_id").to_pylist() == ids
    assert table.column("object_id").to_pylist() == [p % 7 for p in ids]
    assert set(table.column("points").to_pylist()) == {3}
    assert replaced.param_id.tolist() == ids


def test_the_integer_refinement_gives_the_float_one_exactly():
    """The refinement in integers (a day's spacings) against the float one it stands for, gaps, bursts,
    repeated stamps and groups without spacings included: the same numbers, bit for bit."""
    from etl.quality import rows as quality

    rng = np.random.default_rng(5)
    for _ in range(50):
        counts = rng.choice([0, 1, 2, 300, 4000], size=int(rng.integers(1, 9)))
        spacings = np.concatenate(
            [
                rng.integers(0, 2, c) * int(rng.integers(1, 120_000)) + rng.integers(0, 5_000, c)
                for c in counts
            ]
        ).astype(np.int64)
        spacings[rng.random(len(spacings)) < 0.02] *= 40  # gaps
        groups = np.repeat(np.arange(len(counts)), counts)
        seed = np.array(
            [np.median(s) if len(s) else np.nan for s in np.split(spacings, np.cumsum(counts)[:-1])]
        )
        exact = quality._refine(spacings, counts, seed)
        plain = quality._refine_any(spacings, groups, len(counts), seed)
        assert np.array_equal(exact, plain, equal_nan=True)
        assert np.array_equal(
            quality.infer_periods(spacings, groups, len(counts)),
            quality._periods(spacings, counts),
            equal_nan=True,
        )


def test_flatlines_of_stamps_that_go_back():
    """A file not written by etl may hold a parameter's stamps out of order: a run of one value that goes
    back in time is no flatline, and the one-point runs beside it count as none."""
    day = DAYS[0]
    table = pa.table(
        {
            "param_id": [7, 7, 7, 8, 8, 8],
            "ts": pa.array(
                np.array([60_000, 0, 90_000, 0, 60_000, 120_000], np.int64) + day,
                pa.timestamp("ms", tz="UTC"),
            ),
            "value": [1.0, 1.0, 2.0, 5.0, 5.0, 5.0],
        }
    )
    windows = [Window(p, 1, ParamKind.PHYSICAL, Series.RAW, day, day + DAY_MS) for p in (7, 8)]
    seven, eight = day_rows(
        table,
        Ranges.of(Windows.of(Series.RAW, windows)),
        {7: (1, "physical"), 8: (1, "physical")},
        "s",
        (day, day + DAY_MS),
    ).to_pylist()
    assert seven["flatline_seconds"] == 0.0 and eight["flatline_seconds"] == 120.0
