"""Lake tables over many runs: grouped commits, plain appends, metadata that does not grow, the upkeep
each run does. The Iceberg race behind "Missing required files to delete":
tests/unit/sinks/test_iceberg_race.py."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from etl.config import SinkConfig
from etl.sinks.lake import Lake
from etl.storage.atomic import Storage
from etl.timeutil import HOUR_MS, iso, to_ms
from tests.support.checks import assert_exact
from tests.support.configs import make_config
from tests.support.emulator import START
from tests.support.expected import SOURCE
from tests.support.pipeline import run as run_etl

LAKES = ["delta", "iceberg"]
APP = f"etl-{SOURCE}"


def run(config, **options) -> dict:
    return run_etl(config, **options).as_dict()


def lake(out, fmt: str, **sink) -> Lake:
    return Lake(SinkConfig(format=fmt, path=str(out), **sink), Storage(str(out)))


def delta_operations(out, name: str) -> list[dict]:
    entries = sorted((out / name / "_delta_log").glob("*.json"))
    ops = []
    for entry in entries:
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                ops.append(action["commitInfo"])
    return ops


@pytest.mark.parametrize("fmt", LAKES)
def test_a_run_commits_each_table_once_per_group_and_reports_the_files_it_added(emulator, tmp_path, fmt):
    config = make_config(emulator.base_url, tmp_path, sink={"format": fmt})
    summary = run(config)
    assert summary["lake"]["commits"] == 3  # raw (8 slabs: 2 days x 4 buckets), average, candles: one each
    tables = lake(tmp_path, fmt)
    for series in ("raw", "average", "candles"):
        table = tables.series(series)
        assert table.latest(APP) == 1
        # the summary counts the data files the commits added: here, all the table holds
        assert summary["series"][series]["files"] == sum(table.files_per_day().values()) > 0, series
    assert_exact(tmp_path)

    small = make_config(emulator.base_url, tmp_path / "small", sink={"format": fmt, "commit": {"slabs": 3}})
    summary = run(small)
    assert summary["lake"]["commits"] == 3 + 2 + 2  # 8 raw slabs, 4 of average, 4 of candles: by 3 at most
    assert lake(tmp_path / "small", fmt).series("raw").latest(APP) == 3
    assert_exact(tmp_path / "small")


@pytest.mark.parametrize("fmt", LAKES)
def test_new_days_are_appended_and_a_rerun_window_replaces_only_its_rows(fresh_emulator, tmp_path, fmt):
    """The second day is appended (nothing stored can hold its rows); a full refresh replaces every
    window; reference tables whose rows did not change get no new version."""
    first = make_config(
        fresh_emulator.base_url,
        tmp_path,
        sink={"format": fmt},
        window={"end": iso(to_ms(START) + 24 * HOUR_MS)},
    )
    run(first)
    run(make_config(fresh_emulator.base_url, tmp_path, sink={"format": fmt}, window={"overlap": "0s"}))
    tables = lake(tmp_path, fmt)
    if fmt == "delta":
        ops = [op for op in delta_operations(tmp_path, "raw") if op.get("etl.app")]
        assert [op["operationParameters"]["mode"] for op in ops] == ["Append", "Append"]
    else:
        table = tables.series("raw")._load()
        ours = [s for s in table.snapshots() if (s.summary.additional_properties or {}).get("etl.app")]
        assert [s.summary.operation.value for s in ours] == ["append", "append"]
    run(make_config(fresh_emulator.base_url, tmp_path, sink={"format": fmt}), full_refresh=True)
    assert_exact(tmp_path)  # the same windows again: replaced, not doubled
    names = tables.dimension_names()
    assert names
    for name in names:  # three runs, one version each: the first snapshot
        if fmt == "delta":
            assert len(list((tmp_path / "dimensions" / name / "_delta_log").glob("*.json"))) == 1, name
        else:
            assert len(tables.dimension(name)._load().snapshots()) == 1, name


@pytest.mark.parametrize("fmt", LAKES)
def test_hourly_runs_keep_metadata_and_files_bounded_and_recovery_survives_expiry(
    fresh_emulator, tmp_path, fmt
):
    """Runs every few hours with few versions kept and no retention: each run expires what is past,
    compacts days that are over and sweeps files no version references (a killed writer's are never
    read). A state lost whole comes back from what the tables keep (the last commit's checkpoint
    outlives expiry); what expired is fetched again and replaces its rows."""
    sink = {"format": fmt, "versions": 3, "retention": "0s"}
    start = to_ms(START)
    orphan = None
    for hour in range(0, 40, 6):  # a run every 6 hours over almost 2 days
        config = make_config(
            fresh_emulator.base_url, tmp_path, sink=sink, window={"end": iso(start + (hour + 1) * HOUR_MS)}
        )
        run(config)
        if orphan is None:  # as if a writer was killed before its commit
            folder = tmp_path / "raw" if fmt == "delta" else tmp_path / "etl" / "raw" / "data"
            stored = next(p for p in folder.rglob("*.parquet") if not p.name.startswith("."))
            orphan = stored.with_name("part-00000-orphan-of-a-killed-writer.parquet")
            shutil.copy(stored, orphan)
            os.utime(orphan, (time.time() - 60, time.time() - 60))
            assert_exact(tmp_path, START, iso(start + (hour + 1) * HOUR_MS))  # never read
    assert orphan is not None and not orphan.exists()
    tables = lake(tmp_path, fmt, versions=3, retention=0)
    raw = tables.series("raw")
    days = raw.files_per_day()
    assert days["2026-11-01"] == 1  # the first day is over: compacted
    assert max(days.values()) <= 2 * 4 + 4
    if fmt == "delta":
        entries = list((tmp_path / "raw" / "_delta_log").glob("*.json"))
        assert len(entries) <= 3 + 10 + 2  # kept versions, the entries since the last checkpoint, slack
    else:
        table = raw._load()
        assert len(table.metadata.snapshots) <= 3 + 2
        metadata = list((tmp_path / "etl" / "raw" / "metadata").iterdir())
        assert len(metadata) < 40
    assert len(raw.history(APP, 0)) < raw.latest(APP)  # older commits are gone from the history...
    # ...yet a state lost whole is rebuilt from what the tables keep, and the rest fetched again
    state = tmp_path / "_state" / SOURCE
    before = raw.latest(APP)
    for segment in sorted((state / "log").glob("*.json")):
        segment.unlink()
    for base in state.glob("base-*.parquet"):
        base.unlink()
    fresh_emulator.clear_requests()
    run(make_config(fresh_emulator.base_url, tmp_path, sink=sink, window={"end": iso(start + 40 * HOUR_MS)}))
    assert lake(tmp_path, fmt).series("raw").latest(APP) >= before
    assert_exact(tmp_path, START, iso(start + 40 * HOUR_MS))


@pytest.mark.parametrize("eager", [True, False])
def test_a_backfill_writes_its_iceberg_files_as_slabs_end_and_a_rerun_still_replaces(
    emulator, tmp_path, monkeypatch, eager
):
    """Slabs into partitions that hold nothing they replace write their data files when they end (a
    backfill's tail is then one metadata commit); the commit replaces what it must either way."""
    from etl.sinks.lake import writer

    monkeypatch.setattr(writer, "EAGER_BYTES", 0 if eager else 1 << 60)
    config = make_config(emulator.base_url, tmp_path, sink={"format": "iceberg"})
    summary = run(config)
    files = lake(tmp_path, "iceberg").series("raw").files_per_day()
    assert sum(files.values()) == (summary["series"]["raw"]["slabs"] if eager else len(files)), files
    assert_exact(tmp_path)
    run(config, full_refresh=True)  # every window again, into partitions that hold them: replaced
    assert_exact(tmp_path)
