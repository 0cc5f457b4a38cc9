"""The benchmark script runs end to end on a tiny dataset, so that `make bench` cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import ROOT


def bench(tmp_path, script: str, *args: str, timeout: int = 240) -> tuple[dict, str]:
    """Runs a benchmark script with `--json` and returns its document and its output."""
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    return json.loads(out.read_text()), done.stdout


def test_benchmark_runs_every_stage_on_a_tiny_dataset(tmp_path):
    # dlt is an optional extra (make bench installs it); the naive peer stands in for the peers here
    doc, stdout = bench(tmp_path, "run.py", "--quick", "--skip", "dlt")
    points = doc["dataset"]["points"]
    assert points > 1000 and doc["dataset"]["requests"] >= doc["dataset"]["planned_windows"] > 0
    main, cpu_bound = doc["tables"]["50ms"], doc["tables"]["0ms"]
    for name in ("etl", "naive"):
        assert main[name]["best"]["rows"] == points, name  # the same work: every source point, once
    assert cpu_bound["etl"]["best"]["rows"] == points
    assert (
        20 < main["ceiling"]["best"]["peak_rss_mb"] < main["etl"]["best"]["peak_rss_mb"]
    )  # measured per child
    # How many times faster etl is than the naive script is the benchmark's figure (its vs_naive target,
    # printed), not an assert here: a busy machine slows the two unevenly.
    assert all(main[name]["best"]["seconds"] > 0 for name in ("etl", "naive"))
    assert doc["memory"]["2"]["rows"] > doc["memory"]["1"]["rows"]
    assert doc["emulator"]["requests"] > 0 and doc["emulator"]["errors"] == 0
    assert {"ceiling_share", "vs_naive", "peak_rss", "rss_growth", "emulator_rps"} <= set(doc["targets"])
    for lake in ("etl-delta", "etl-iceberg"):  # the same run into lake tables: every point, once
        assert main[lake]["best"]["rows"] == points, lake
    assert "skipped: --skip" in stdout  # dlt's row says why it is missing


@pytest.mark.slow  # make soak: the fleet benchmark is the longest of these smoke runs
def test_fleet_benchmark_runs_every_stage_on_tiny_fleets(tmp_path):
    doc, stdout = bench(tmp_path, "fleet.py", "--quick")
    for run in doc["sizes"].values():
        # the same work: the replay is the warm-up run's requests (sign-in excepted); discovery's
        # look-ahead pages may differ by a request or two between runs
        assert run["etl"]["points"] > 0 and run["ceiling"]["requests"] > 0
        assert (
            abs(run["etl"]["requests"] - run["ceiling"]["requests"]) <= 2 + run["ceiling"]["requests"] // 20
        )
        assert run["etl"]["files_per_partition"] >= 1 and run["cpu_ratio"] > 0
    assert set(doc["latencies"]) == {"0ms", "10ms"}
    assert doc["history"]["2"]["points"] > doc["history"]["1"]["points"]
    assert "peak RSS from the smallest to the widest fleet" in stdout


@pytest.mark.slow  # make soak: hourly runs into every format
def test_schedule_benchmark_runs_hourly_runs_into_every_format(tmp_path):
    doc, stdout = bench(tmp_path, "schedule.py", "--quick", timeout=300)
    assert set(doc["formats"]) == {"parquet", "delta", "iceberg"}
    for name, f in doc["formats"].items():
        assert len(f["runs"]) == 3 and f["exact"], (name, f["exact_detail"])
        assert f["files_per_partition_max"] >= 1 and f["non_data_bytes"] > 0 and f["first"]["cpu_seconds"] > 0
    assert "files/day" in stdout


def test_ab_benchmark_pairs_two_builds_on_the_hourly_start_up(tmp_path):
    trees = [f"A={ROOT}", f"B={ROOT}"]
    doc, stdout = bench(
        tmp_path, "ab.py", "--trees", *trees, "--workload", "hour", "--repeat", "1", timeout=120
    )
    assert set(doc["builds"]) == {"A", "B"}
    for build in doc["builds"].values():
        assert 0 < build["cpu_seconds"]["min"] <= build["cpu_seconds"]["median"]
        assert build["peak_rss_mb"]["median"] > 20
    assert "load average" in stdout


def test_state_benchmark_loads_and_plans_a_small_state(tmp_path):
    doc, stdout = bench(tmp_path, "state.py", "--params", "2000", "--days", "30", "--repeat", "1")
    assert doc["keys"] == 3 * 2000 and doc["windows"] > 0
    assert doc["load_seconds"] > 0 and doc["load_and_plan_cpu_seconds"] >= 0
    assert "loaded and planned" in stdout
