"""End to end against the emulator: exact output, incremental runs, sinks, readers, splitting, config errors."""

from __future__ import annotations

import re

import duckdb
import pyarrow.dataset as ds
import pytest

from etl.pipeline import coordinator
from etl.state import store
from etl.timeutil import HOUR_MS, to_ms
from tests.support.checks import assert_exact
from tests.support.cli import etl
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, series_requests
from tests.support.expected import SERIES, SOURCE
from tests.support.output import data_files, read
from tests.support.pipeline import run


@pytest.mark.parametrize("transport", ["etl", "httpx"])
def test_full_run_writes_exactly_the_source_points(emulator, tmp_path, transport):
    """With etl's own HTTP transport and with httpx's (source.transport), the same exact output."""
    summary = run(make_config(emulator.base_url, tmp_path, source={"transport": transport}))
    assert_exact(tmp_path)
    body = summary.as_dict()
    assert body["status"] == "ok" and body["objects"] == 2 and body["parameters"] == 8
    assert body["series"]["raw"]["windows"] == 8 * 2  # one per parameter per day
    assert list((tmp_path / "_runs").glob("*.json"))
    # date partitions, one file each: a small fleet's one bucket (sink.buckets auto)
    files = data_files(tmp_path, "raw")
    assert {f.rsplit("/", 1)[0] for f in files} == {"raw/date=2026-11-01", "raw/date=2026-11-02"}
    assert {f.rsplit("/", 1)[1] for f in files} == {f"part-{SOURCE}-b0of1.parquet"}


def test_incremental_run_fetches_only_new_windows_and_equals_one_full_run(fresh_emulator, tmp_path):
    middle = "2026-11-02T06:00:00Z"
    first = make_config(fresh_emulator.base_url, tmp_path, window={"end": middle})
    run(first)
    fresh_emulator.clear_requests()
    second = make_config(fresh_emulator.base_url, tmp_path)
    summary = run(second).as_dict()
    # Once per route the client may ask a wider span, to rule out a silent cap on answers (etl/extract.py);
    # it keeps nothing of it. Every other request lies within the new windows.
    new = to_ms(END) - to_ms(middle) + HOUR_MS
    starts = [
        int(r["path"].rstrip("/").split("/")[-2])
        for r in series_requests(fresh_emulator)
        if r["interval_ms"] <= new
    ]
    assert starts and min(starts) >= to_ms(middle) - HOUR_MS  # nothing before the overlap is read again
    assert summary["series"]["raw"]["windows"] == 8
    assert_exact(tmp_path)
    # a third run with nothing new fetches nothing and changes nothing
    before = read(tmp_path, "raw")
    fresh_emulator.clear_requests()
    run(second)
    assert series_requests(fresh_emulator) == []
    assert read(tmp_path, "raw").equals(before)


def test_coverage_merged_during_the_run_checkpoints_every_window(emulator, tmp_path, monkeypatch):
    """Committed windows merged into the coverage after every slab rather than once at the end: the base
    the run compacts into still holds them all, and the next run plans nothing."""
    monkeypatch.setattr(coordinator, "MERGE_AFTER", 1)
    monkeypatch.setattr(store, "COMPACT_AFTER", 1)  # however few segments the slabs' checkpoints shared
    config = make_config(emulator.base_url, tmp_path)
    run(config)
    assert list((tmp_path / "_state").rglob("base-*.parquet"))  # the log was folded into a base
    planned = run(config, dry_run=True).as_dict()["planned"]
    assert planned and all(series["windows"] == 0 for series in planned.values())


def test_rerun_and_full_refresh_never_duplicate(emulator, tmp_path):
    config = make_config(emulator.base_url, tmp_path)
    run(config)
    run(config, full_refresh=True)
    run(config, start=to_ms("2026-11-01T12:00:00Z"), end=to_ms("2026-11-02T12:00:00Z"), full_refresh=True)
    assert_exact(tmp_path)


def test_full_answers_are_split_until_complete(emulator, tmp_path):
    config = make_config(emulator.base_url, tmp_path, extract={"max_points": 40})
    summary = run(config).as_dict()
    assert summary["splits"] > 0
    assert_exact(tmp_path)


def test_csv_sink_and_duckdb_read_every_dataset(emulator, tmp_path):
    run(make_config(emulator.base_url, tmp_path / "pq"))
    run(
        make_config(
            emulator.base_url, tmp_path / "csv", sink={"format": "csv", "path": str(tmp_path / "csv")}
        )
    )
    header = next((tmp_path / "csv" / "raw").rglob("*.csv")).read_text().splitlines()[:2]
    assert header[0] == "source,object_id,param_id,kind,ts,value"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", header[1].split(",")[4])
    con = duckdb.connect()
    for series in SERIES:
        pq_rows = con.sql(
            f"select param_id, ts, * exclude (param_id, ts, date) from read_parquet('{tmp_path}/pq/{series}/**/*.parquet',"
            " hive_partitioning=1) order by 1, 2"
        ).fetchall()
        csv_rows = con.sql(
            f"select param_id, ts::timestamptz, * exclude (param_id, ts, date) from read_csv('{tmp_path}/csv/{series}/**/*.csv',"
            " hive_partitioning=1) order by 1, 2"
        ).fetchall()
        assert len(pq_rows) == len(csv_rows) > 0
        assert [r[0] for r in pq_rows] == [r[0] for r in csv_rows]
    names = con.sql(
        f"select p.name, count(*) from read_parquet('{tmp_path}/pq/raw/**/*.parquet', hive_partitioning=1) r "
        f"join '{tmp_path}/pq/dimensions/parameters/*.parquet' p on p.id = r.param_id group by 1"
    ).fetchall()
    assert len(names) == 8
    for table in (
        "objects",
        "units",
        "parameters",
        "zones",
        "classifiers",
        "room_types",
        "rooms",
        "commands",
    ):
        assert (
            con.sql(f"select count(*) from '{tmp_path}/pq/dimensions/{table}/*.parquet'").fetchall()[0][0] > 0
        ), table


def test_object_partitioning(emulator, tmp_path):
    config = make_config(emulator.base_url, tmp_path, sink={"partition_by": ["date", "object_id"]})
    run(config)
    assert list((tmp_path / "raw" / "date=2026-11-01" / "object_id=2").glob("part-*.parquet"))
    got = ds.dataset(tmp_path / "raw", format="parquet", partitioning="hive").to_table()
    assert set(got.column("object_id").to_pylist()) == {1, 2}


def test_restricted_login_exports_only_visible_objects(emulator, tmp_path):
    config = make_config(
        emulator.base_url, tmp_path, source={"username": "restricted", "password": "restricted"}
    )
    run(config)
    assert_exact(tmp_path, objects=(1,))
    objects = duckdb.sql(f"select id from '{tmp_path}/dimensions/objects/*.parquet'").fetchall()
    assert objects == [(1,)]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["window"].update(start="2026-11-05T00:00:00Z"), "window: start must be before end"),
        (lambda d: d.update(extra_key=1), "extra_key: unknown key"),
        (lambda d: d["sink"].update(format="xml"), "sink.format"),
        (lambda d: d["extract"].update(concurrency="many"), "extract.concurrency"),
        (lambda d: d["source"].update(password="${ETL_TEST_UNSET_VARIABLE}"), "ETL_TEST_UNSET_VARIABLE"),
        (lambda d: d["select"].update(objects=[1, 99]), "select.objects: object(s) 99 not visible"),
    ],
)
def test_bad_config_gives_one_line_and_exit_2(emulator, tmp_path, mutate, message):
    data = config_dict(emulator.base_url, tmp_path / "out")
    mutate(data)
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)))
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("etl: error")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("source: {base_url: x\nwindow: [\n")
    result = etl("run", "-c", str(path))
    assert result.returncode == 2 and "bad.yaml" in result.stderr and "line" in result.stderr
    assert "Traceback" not in result.stderr


def test_plan_shows_requests_without_fetching(fresh_emulator, tmp_path):
    path = write_config(tmp_path / "c.yaml", config_dict(fresh_emulator.base_url, tmp_path / "out"))
    fresh_emulator.clear_requests()
    result = etl("plan", "-c", str(path))
    assert result.returncode == 0, result.stderr
    assert "raw" in result.stdout and "16 windows" in result.stdout
    assert not any("/db/measure" in r["path"] for r in fresh_emulator.requests())
    assert not (tmp_path / "out").exists()
