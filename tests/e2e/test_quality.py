"""The quality dataset `etl run` keeps: one row per parameter and UTC day, right against the emulator's
generator, the same whether a day is fetched at once or in pieces, in every layout. The rows computed on
their own, without a run: tests/unit/quality/test_quality_rows.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from etl.dataset.query import connect
from etl.model import QUALITY_SCHEMA
from etl.timeutil import DAY_MS, to_ms
from etl_emulator.server import run_emulator
from tests.support.configs import make_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SOURCE, day_facts
from tests.support.output import read_quality
from tests.support.pipeline import run

PARAMS = [1001, 1002, 1003, 1501, 2001, 2002, 2003, 2501]
DAYS = [to_ms(START), to_ms(START) + DAY_MS]


@pytest.fixture(scope="module")
def lake(emulator, tmp_path_factory):
    out = tmp_path_factory.mktemp("quality") / "out"
    summary = run(make_config(emulator.base_url, out)).as_dict()
    return out, summary


def rows_by_key(table: pa.Table) -> dict[tuple[int, int], dict]:
    return {(r["param_id"], int(r["day"].timestamp() * 1000)): r for r in table.to_pylist()}


def test_every_parameter_day_has_one_row_that_matches_the_generator(lake):
    out, summary = lake
    got = rows_by_key(read_quality(out))
    assert sorted(got) == sorted((p, d) for p in PARAMS for d in DAYS)  # exactly one row per (parameter, day)
    assert summary["quality"]["rows"] == len(got)
    assert summary["quality"]["lowest_completeness"] == min(r["completeness"] for r in got.values())
    for (param_id, day), row in got.items():
        want = day_facts(emulator_config(), param_id, day)
        where = (param_id, day)
        assert (
            row["source"] == SOURCE and row["object_id"] == param_id // 1000 and row["kind"] == want["kind"]
        ), where
        assert row["points"] == want["points"], where
        assert int(row["first_ts"].timestamp() * 1000) == want["first_ts"], where
        assert int(row["last_ts"].timestamp() * 1000) == want["last_ts"], where
        assert row["longest_gap_seconds"] == want["longest_gap_seconds"], where
        assert row["flatline_seconds"] == want["flatline_seconds"], where
        assert row["span_seconds"] == DAY_MS / 1000
        # The period is inferred from the day's spacings: within 1% of the generator's.
        assert row["period_seconds"] == pytest.approx(want["period_seconds"], rel=0.01), where
        assert row["expected_points"] == pytest.approx(DAY_MS / 1000 / want["period_seconds"], rel=0.01), (
            where
        )
        truth = want["points"] / (DAY_MS / 1000 / want["period_seconds"])
        assert row["completeness"] == pytest.approx(truth, abs=0.01), where
        # Each day has one gap of 15-90 minutes and nothing else missing: near 1, never below 1 - 90/1440.
        assert 1 - 90 / 1440 - 0.01 <= row["completeness"] <= 1.0, where
        # The longest gap is the day's gap, plus at most the spacing around it.
        gap = want["gap_seconds"]
        assert gap <= row["longest_gap_seconds"] <= gap + 2 * want["period_seconds"], where


def test_a_signals_flatline_is_its_longest_constant_block(lake):
    out, _ = lake
    for (param_id, day), row in rows_by_key(read_quality(out)).items():
        if param_id % 1000 != 3:  # the signal parameters of the emulator: 1003, 2003
            continue
        assert row["kind"] == "signal"
        assert (
            row["flatline_seconds"] == day_facts(emulator_config(), param_id, day)["flatline_seconds"] > 3600
        )


def test_an_incremental_run_splitting_a_day_gives_the_rows_of_one_run(emulator, lake, tmp_path):
    out, _ = lake
    whole = read_quality(out)
    run(make_config(emulator.base_url, tmp_path / "split", window={"end": "2026-11-02T06:00:00Z"}))
    partial = rows_by_key(read_quality(tmp_path / "split"))
    # Meanwhile the day so far is described as far as it was asked: midnight to the run's end.
    assert all(r["span_seconds"] == 6 * 3600 for (_, day), r in partial.items() if day == DAYS[1])
    run(make_config(emulator.base_url, tmp_path / "split"))
    assert read_quality(tmp_path / "split").equals(whole)
    # raw windows of an hour (24 per day, merged in one file), and a full refresh of a middle stretch
    hourly = make_config(
        emulator.base_url,
        tmp_path / "hourly",
        extract={"raw_window": "1h"},
        window={"end": "2026-11-01T13:30:00Z"},
    )
    run(hourly)
    run(make_config(emulator.base_url, tmp_path / "hourly", extract={"raw_window": "1h"}))
    run(
        make_config(emulator.base_url, tmp_path / "hourly"),
        start=to_ms("2026-11-01T12:00:00Z"),
        end=to_ms("2026-11-02T12:00:00Z"),
        full_refresh=True,
    )
    assert read_quality(tmp_path / "hourly").equals(whole)


def test_object_partitions_and_csv_hold_the_same_rows(emulator, lake, tmp_path):
    out, _ = lake
    whole = read_quality(out)
    run(make_config(emulator.base_url, tmp_path / "objects", sink={"partition_by": ["date", "object_id"]}))
    assert list((tmp_path / "objects" / "quality" / "date=2026-11-01" / "object_id=2").glob("part-*.parquet"))
    assert read_quality(tmp_path / "objects").equals(whole)

    csv = make_config(
        emulator.base_url, tmp_path / "csv", sink={"format": "csv", "path": str(tmp_path / "csv")}
    )
    run(csv)
    assert (tmp_path / "csv" / "quality" / "date=2026-11-01").is_dir()
    columns = "param_id, date, points, expected_points, completeness, longest_gap_seconds, flatline_seconds, first_ts"
    query = f"select {columns} from quality order by param_id, date"
    assert (
        connect(csv).sql(query).fetchall()
        == connect(make_config(emulator.base_url, out)).sql(query).fetchall()
    )


def test_a_day_without_points_gets_a_row_and_the_view_carries_the_period(tmp_path):
    """The emulator's clock stops at the end of the second day: the third day, asked for, has no point. (It
    sends no Date header, so the run takes its own later clock for the server's: a silent day.)"""
    with run_emulator(emulator_config(now_ms=to_ms(END), date_header=False)) as emulator:
        config = make_config(
            emulator.base_url, tmp_path, window={"end": "2026-11-04T00:00:00Z"}, series=["raw"]
        )
        run(config)
    table = read_quality(tmp_path)
    empty = table.filter(
        pc.equal(table.column("day"), pa.scalar(to_ms(END), QUALITY_SCHEMA.field("day").type))
    )
    assert empty.num_rows == len(PARAMS)
    for row in empty.to_pylist():
        assert row["points"] == 0 and row["completeness"] == 0.0 and row["first_ts"] is None
        assert row["expected_points"] is None and row["period_seconds"] is None  # no spacing to infer it from
        assert row["longest_gap_seconds"] == row["span_seconds"] == 86400.0
    view = (
        connect(config)
        .sql(
            "select param_id, expected_points, period_seconds, period_carried, completeness "
            "from quality where date = DATE '2026-11-03' order by param_id"
        )
        .fetchall()
    )
    before = {r["param_id"]: r for r in table.to_pylist() if int(r["day"].timestamp() * 1000) == DAYS[1]}
    for param_id, expected, period, carried, completeness in view:
        assert carried and period == before[param_id]["period_seconds"] and completeness == 0.0
        assert expected == round(86400 / period)
