"""Smoke tests of the benchmarks against servers that are not ours (benchmarks/foreign.py and
benchmarks/servers/): each runs end to end on a tiny fleet. Nothing here is timed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

from servers import nginx, wrk  # noqa: E402


def _foreign(tmp_path: Path, *args: str) -> dict:
    """The benchmark's JSON. Its output goes to files, not pipes: a server it started and did not stop
    would hold a pipe open, and the test would wait for it instead of showing what failed."""
    out, log = tmp_path / "foreign.json", tmp_path / "foreign.log"
    with log.open("w") as sink:
        code = subprocess.call(
            [sys.executable, "benchmarks/foreign.py", "--quick", "--json", str(out), *args],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=240,
        )
    assert code == 0, log.read_text()[-3000:]
    return json.loads(out.read_text())


def _check(row: dict, contenders: tuple[str, ...]) -> None:
    for name in contenders:
        assert row[name]["median_s"] > 0, name
    assert row["etl"]["points"] > 1000 and row["misses"] <= row["requests"] // 10
    # etl's CPU beside the floor's, like for like: its run record's against the loop, process against process
    assert 0 < row["etl"]["run_cpu_seconds"] < row["etl"]["cpu_seconds"]
    assert row["run_cpu_vs_floor"] > 0 and row["process_cpu_vs_floor"] > 0
    assert len(row["floor"]["runs"]) == len(row["etl"]["runs"]) and row["floor"]["cpu_per_million"] > 0
    assert row["etl"]["cpu_bound_s"] > 0 and row["etl"]["server_cpu_seconds"] >= 0
    assert row["latency_bound_s"] == pytest.approx(row["requests"] * row["latency_s"] / 16)


def test_the_threaded_server_replays_every_request_etl_makes(tmp_path):
    doc = _foreign(tmp_path, "--servers", "threaded")
    size = doc["sizes"]["16"]
    assert size["floor"]["points"] == size["points"] and size["floor"]["cpu_per_million"] > 0
    rows = size["servers"]["threaded"]
    assert set(rows) == {"0ms", "10ms"}
    for row in rows.values():
        _check(row, ("etl", "httpx") if wrk.missing() else ("etl", "httpx", "wrk"))


@pytest.mark.skipif(bool(nginx.missing() or wrk.missing()), reason=f"{nginx.missing() or wrk.missing()}")
@pytest.mark.slow  # make soak: nginx and wrk beside etl and httpx
def test_nginx_serves_the_recording_as_files_to_etl_httpx_and_wrk(tmp_path):
    doc = _foreign(tmp_path, "--servers", "nginx")
    for row in doc["sizes"]["16"]["servers"]["nginx"].values():
        _check(row, ("etl", "httpx", "wrk"))


def test_a_missing_tool_is_skipped_with_the_command_that_installs_it(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(nginx, "ECHO_MODULE", Path("/nonexistent/ngx_http_echo_module.so"))
    assert "make bench-tools" in (wrk.missing() or "")
    assert "make bench-tools" in (nginx.missing() or "")


def test_the_in_flight_trace_times_every_series_request(emulator, tmp_path):
    from tests.support.configs import config_dict, write_config

    config = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    done = subprocess.run(
        [sys.executable, "benchmarks/inflight.py", "--", "run", "-c", str(config), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-1500:]
    trace = json.loads(done.stderr.strip().splitlines()[-1])
    assert trace["series_requests"] > 0 and 0 < trace["mean_in_flight"] <= 8  # the test config's concurrency
    assert len(trace["timeline"]) >= 1
