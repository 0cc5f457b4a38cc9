"""The benchmark script runs end to end on a tiny dataset, so that `make bench` cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT


def test_benchmark_runs_every_stage_on_a_tiny_dataset(tmp_path):
    out = tmp_path / "bench.json"
    # dlt is an optional extra (make bench installs it); the naive peer stands in for the peers here
    done = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--quick", "--skip", "dlt", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    doc = json.loads(out.read_text())
    points = doc["dataset"]["points"]
    assert points > 1000 and doc["dataset"]["requests"] >= doc["dataset"]["planned_windows"] > 0
    main, cpu_bound = doc["tables"]["50ms"], doc["tables"]["0ms"]
    for name in ("etl", "naive"):
        assert main[name]["best"]["rows"] == points, name  # the same work: every source point, once
    assert cpu_bound["etl"]["best"]["rows"] == points
    assert (
        20 < main["ceiling"]["best"]["peak_rss_mb"] < main["etl"]["best"]["peak_rss_mb"]
    )  # measured per child
    assert main["etl"]["best"]["seconds"] < main["naive"]["best"]["seconds"]
    assert doc["memory"]["2"]["rows"] > doc["memory"]["1"]["rows"]
    assert doc["emulator"]["requests"] > 0 and doc["emulator"]["errors"] == 0
    assert {"ceiling_share", "vs_naive", "peak_rss", "rss_growth", "emulator_rps"} <= set(doc["targets"])
    for lake in ("etl-delta", "etl-iceberg"):  # the same run into lake tables: every point, once
        assert main[lake]["best"]["rows"] == points, lake
    assert "skipped: --skip" in done.stdout  # dlt's row says why it is missing


def test_fleet_benchmark_runs_every_stage_on_tiny_fleets(tmp_path):
    out = tmp_path / "fleet.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/fleet.py", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    doc = json.loads(out.read_text())
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
    assert "peak RSS from the smallest to the widest fleet" in done.stdout
