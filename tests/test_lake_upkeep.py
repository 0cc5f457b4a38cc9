"""Lake tables over many runs: grouped commits, plain appends, metadata that does not grow, the upkeep
each run does, and the Iceberg race behind "Missing required files to delete"."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from etl.config import SinkConfig
from etl.pipeline.runner import Runner, RunOptions
from etl.sinks.lake import Lake
from etl.storage.files import Storage
from etl.timeutil import HOUR_MS, iso, to_ms
from tests.conftest import START, make_config
from tests.expected import SOURCE
from tests.expected import assert_exact as assert_window_exact
from tests.test_pipeline import assert_exact

LAKES = ["delta", "iceberg"]
APP = f"etl-{SOURCE}"


def run(config, **options):
    return asyncio.run(Runner(config, RunOptions(progress=False, **options)).run()).as_dict()


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
    first = make_config(
        fresh_emulator.base_url,
        tmp_path,
        sink={"format": fmt},
        window={"end": iso(to_ms(START) + 24 * HOUR_MS)},
    )
    run(first)
    run(make_config(fresh_emulator.base_url, tmp_path, sink={"format": fmt}, window={"overlap": "0s"}))
    if fmt == "delta":
        ops = [op for op in delta_operations(tmp_path, "raw") if op.get("etl.app")]
        assert [op["operationParameters"]["mode"] for op in ops] == ["Append", "Append"]
    else:
        table = lake(tmp_path, fmt).series("raw")._load()
        ours = [s for s in table.snapshots() if (s.summary.additional_properties or {}).get("etl.app")]
        assert [s.summary.operation.value for s in ours] == ["append", "append"]
    run(make_config(fresh_emulator.base_url, tmp_path, sink={"format": fmt}), full_refresh=True)
    assert_exact(tmp_path)  # the same windows again: replaced, not doubled


@pytest.mark.parametrize("fmt", LAKES)
def test_hourly_runs_keep_metadata_and_files_bounded_and_recovery_survives_expiry(
    fresh_emulator, tmp_path, fmt
):
    """Many hourly runs with few versions kept and no retention: each run expires what is past, compacts
    days that are over, and the checkpoint of the last commit still comes back once history is gone."""
    sink = {"format": fmt, "versions": 3, "retention": "0s"}
    start = to_ms(START)
    for hour in range(0, 40, 3):  # a run every 3 hours over almost 2 days
        config = make_config(
            fresh_emulator.base_url, tmp_path, sink=sink, window={"end": iso(start + (hour + 1) * HOUR_MS)}
        )
        run(config)
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
    # ...yet a state that lost its last segments gets the last commit's windows back from the table
    state = tmp_path / "_state" / SOURCE
    before = raw.latest(APP)
    for segment in sorted((state / "log").glob("*.json")):
        segment.unlink()
    for base in state.glob("base-*.parquet"):
        base.unlink()
    fresh_emulator.clear_requests()
    run(make_config(fresh_emulator.base_url, tmp_path, sink=sink, window={"end": iso(start + 40 * HOUR_MS)}))
    assert raw.latest(APP) >= before
    assert_window_exact(tmp_path, START, iso(start + 40 * HOUR_MS))


@pytest.mark.parametrize("fmt", LAKES)
def test_reference_tables_get_no_new_version_when_nothing_changed(emulator, tmp_path, fmt):
    config = make_config(emulator.base_url, tmp_path, sink={"format": fmt})
    run(config)
    tables = lake(tmp_path, fmt)
    names = tables.dimension_names()
    assert names

    def versions() -> dict:
        if fmt == "delta":
            return {n: len(list((tmp_path / "dimensions" / n / "_delta_log").glob("*.json"))) for n in names}
        return {n: len(tables.dimension(n)._load().snapshots()) for n in names}

    before = versions()
    run(config, full_refresh=True)
    assert versions() == before


def test_an_overwrite_judges_each_manifest_by_its_own_partition_bounds(tmp_path):
    """pyiceberg's manifest evaluator keeps the manifest it evaluates on itself, and an overwrite calls
    one evaluator from several threads: a thread that resumes after another evaluated its manifest
    reads the other's bounds. Replayed here without threads: manifest A's bounds are read once, then B
    is evaluated by the same evaluator, then A's evaluation goes on."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan, LessThanOrEqual
    from pyiceberg.expressions.visitors import manifest_evaluator
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _OverwriteFiles
    from pyiceberg.transforms import DayTransform

    from etl.sinks.lake.iceberg import _iso, _producers, _thread_safe

    catalog = load_catalog("t", type="sql", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    schema = pa.schema([("param_id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    txn = catalog.create_table_transaction(("n", "t"), schema=schema)
    with txn.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    txn.commit_transaction()
    table = catalog.load_table(("n", "t"))
    for day in (1, 5):
        stamp = pa.scalar(to_ms(f"2026-11-0{day}T12:00:00Z") * 1000, pa.timestamp("us", tz="UTC"))
        table.append(pa.table({"param_id": [1], "ts": pa.array([stamp.value], schema.field("ts").type)}))
    first, second = sorted(
        table.current_snapshot().manifests(table.io), key=lambda m: m.partitions[0].lower_bound
    )
    day = to_ms("2026-11-01T00:00:00Z") // 86_400_000
    where = And(GreaterThanOrEqual("ts_day", day), LessThanOrEqual("ts_day", day))

    class Interleaved(list):
        """A's bounds: the first read lets 'another thread' evaluate B."""

        def __init__(self, items, evaluate) -> None:
            super().__init__(items)
            self.evaluate, self.fired = evaluate, False

        def __getitem__(self, index):
            if not self.fired:
                self.fired = True
                self.evaluate(second)
            return super().__getitem__(index)

    class Manifest:
        def __init__(self, manifest, evaluate) -> None:
            self.partitions = Interleaved(manifest.partitions, evaluate)

    def interleaved(evaluate) -> bool:
        return evaluate(Manifest(first, evaluate))

    spec_, iceberg_schema = table.spec(), table.schema()
    shared = manifest_evaluator(spec_, iceberg_schema, where)
    assert shared(first) and not shared(second)  # alone, each is judged right
    assert not interleaved(shared)  # pyiceberg's: A judged by B's bounds, its files skipped
    assert interleaved(_thread_safe(manifest_evaluator(spec_, iceberg_schema, where)))  # ours: A by A's

    # The same through the overwrites themselves: pyiceberg's, and ours (etl/sinks/lake/iceberg.py)
    on_ts = And(
        GreaterThanOrEqual("ts", _iso(day * 86_400_000)), LessThan("ts", _iso((day + 1) * 86_400_000))
    )

    def evaluator(cls):
        producer = cls(Operation.OVERWRITE, table.transaction(), table.io)
        producer.delete_by_predicate(on_ts)
        return producer._build_manifest_evaluator(spec_.spec_id)

    _, overwrite = _producers()
    assert not interleaved(evaluator(_OverwriteFiles))
    assert interleaved(evaluator(overwrite))
