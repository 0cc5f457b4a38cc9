"""sink.buckets auto: a new small dataset is written one file per partition, the count is recorded at its
first run and kept; datasets checkpointed before the record, and lake tables, keep 4."""

from __future__ import annotations

import json

import pytest

from etl.config import parse_config
from etl.errors import StorageError
from etl.pipeline.build import Build
from etl.sinks import layout
from etl.state import StateStore
from etl.storage.atomic import Storage
from tests.support.checks import assert_exact
from tests.support.configs import config_dict, make_config
from tests.support.expected import SOURCE
from tests.support.output import data_files
from tests.support.pipeline import run

MIDDLE = "2026-11-02T06:00:00Z"


def _names(out) -> set[str]:
    return {f.rsplit("/", 1)[1] for series in ("raw", "average", "quality") for f in data_files(out, series)}


def _recorded(out) -> dict:
    """The files per partition the dataset's record holds (beside its format, partitioning and source)."""
    record = json.loads((out / "_state" / SOURCE / "layout.json").read_text())
    assert (record["format"], record["partition_by"], record["source"]) == ("parquet", ["date"], SOURCE)
    return {"buckets": record["buckets"]}


def test_a_small_new_dataset_gets_one_file_per_partition_and_keeps_it(emulator, tmp_path, monkeypatch):
    run(make_config(emulator.base_url, tmp_path, window={"end": MIDDLE}))
    assert _names(tmp_path) == {f"part-{SOURCE}-b0of1.parquet"}
    assert _recorded(tmp_path) == {"buckets": 1}
    # The fleet outgrows the threshold: the recorded count stays, whatever the width.
    monkeypatch.setattr(layout, "AUTO_WIDE", 2)
    run(make_config(emulator.base_url, tmp_path))
    assert _names(tmp_path) == {f"part-{SOURCE}-b0of1.parquet"} and _recorded(tmp_path) == {"buckets": 1}
    assert_exact(tmp_path)
    # A new dataset of that width is split four ways.
    wide = tmp_path / "wide"
    run(make_config(emulator.base_url, wide))
    names = _names(wide)
    assert names <= {f"part-{SOURCE}-b{i}of4.parquet" for i in range(4)} and len(names) > 1
    assert _recorded(wide) == {"buckets": 4}


def test_a_dataset_checkpointed_before_the_record_keeps_four_and_stays_exact(emulator, tmp_path):
    run(make_config(emulator.base_url, tmp_path, window={"end": MIDDLE}, sink={"buckets": 4}))
    (tmp_path / "_state" / SOURCE / "layout.json").unlink()  # as an older version left it
    run(make_config(emulator.base_url, tmp_path))
    assert _recorded(tmp_path) == {"buckets": 4}
    assert all(n.endswith("of4.parquet") for n in _names(tmp_path))
    assert_exact(tmp_path)


def test_a_count_set_in_the_config_wins_and_is_kept_by_later_auto_runs(emulator, tmp_path):
    run(make_config(emulator.base_url, tmp_path, window={"end": MIDDLE}, sink={"buckets": 2}))
    assert _recorded(tmp_path) == {"buckets": 2}
    run(make_config(emulator.base_url, tmp_path))  # auto: the dataset's own count
    assert all(n.endswith("of2.parquet") for n in _names(tmp_path)) and _recorded(tmp_path) == {"buckets": 2}
    assert_exact(tmp_path)


def test_a_dry_run_records_nothing(emulator, tmp_path):
    run(make_config(emulator.base_url, tmp_path), dry_run=True)
    assert not (tmp_path / "_state" / SOURCE / "layout.json").exists()


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_lake_tables_keep_four(tmp_path, fmt):
    config = parse_config(config_dict("http://127.0.0.1:9", tmp_path, sink={"format": fmt}))
    build = Build(config)
    assert build.decide_buckets(build.state_store(), 10, existing=False, record=False) == 4


def test_auto_and_bad_counts_in_the_config():
    def sink(value):
        return parse_config(config_dict("http://127.0.0.1:9", "out", sink={"buckets": value})).sink

    assert sink("auto").buckets is None and sink(" Auto ").buckets is None and sink(3).buckets == 3
    for bad in (0, "many", 5000):
        with pytest.raises(Exception, match="sink.buckets"):
            sink(bad)


@pytest.mark.parametrize("text", ["{not json", "[4]", '{"buckets": 0}', '{"buckets": "4"}', "{}"])
def test_a_damaged_record_is_refused_naming_the_file(tmp_path, text):
    (tmp_path / "layout.json").write_text(text)
    with pytest.raises(StorageError, match="layout.json"):
        StateStore(Storage(str(tmp_path))).buckets()
