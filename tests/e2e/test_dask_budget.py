"""A run on a Dask cluster (etl/pipeline/cluster.py): one limit on the requests in flight for the whole
cluster, and a run that ends: without workers, after `executor.worker_wait`, with one line and exit 4;
on SIGTERM, within seconds, the slabs on the workers stopped with their stuck windows left open and the
next run exact, and within the cluster's limit. Bounds are asserted from the run's own record; a wall-clock guard only turns a hang into
a failure."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from etl_emulator.faults import Faults
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact
from tests.support.cli import etl, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.emulator import START, emulator_config
from tests.support.output import checkpoints

END = "2026-11-03T00:00:00Z"  # two days of raw series: a few slabs a worker
GUARD = 60.0  # seconds: only a hang comes near it


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("etl: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def summary_of(out: Path) -> dict:
    (path,) = (out / "_runs").glob("*.json")
    return json.loads(path.read_bytes())


@pytest.fixture
def idle_scheduler() -> Iterator[str]:
    """A Dask scheduler that no worker ever joins."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp://",
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as cluster:
        yield cluster.scheduler_address


def test_a_scheduler_without_workers_ends_the_run_after_executor_worker_wait(
    emulator, idle_scheduler, tmp_path
):
    out = tmp_path / "out"
    data = config_dict(
        emulator.base_url, out, executor={"kind": "dask", "address": idle_scheduler, "worker_wait": "1s"}
    )
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--no-progress", timeout=GUARD)
    assert result.returncode == 4, result.stderr
    line = one_line(result.stderr)
    assert f"the Dask cluster at {idle_scheduler} has had no worker for 1s (executor.worker_wait)" in line
    summary = summary_of(out)
    assert summary["status"] == "failed" and summary["seconds"] < 1 + 30  # the wait, and a loaded machine
    assert not len(checkpoints(out))


@pytest.fixture
def dripping() -> Iterator[RunningEmulator]:
    """Half the series answers never end (a byte a second)."""
    with run_emulator(emulator_config(faults=Faults(hostile=["drip"], hostile_rate=0.5, seed=1))) as emu:
        yield emu


def test_sigterm_stops_a_dask_run_within_seconds_and_the_next_run_is_exact(dripping, dask_cluster, tmp_path):
    """Every slab on the workers holds a stuck answer: the stop reaches them, their stuck windows are
    cancelled and stay open. The next run, against a server of 2 workers that refuses (503) past one
    request waiting, with `extract.concurrency: 2`: every task's client and the coordinator's share those
    2, so the server never refuses, and the summary's figures are the cluster's limit."""
    out = tmp_path / "out"
    data = config_dict(
        dripping.base_url,
        out,
        series=["raw"],
        window={"end": END},
        extract={"concurrency": 2},
        executor={"kind": "dask", "address": dask_cluster.scheduler_address},
    )
    path = write_config(tmp_path / "c.yaml", data)
    with open(tmp_path / "stderr", "wb") as stderr:
        proc = etl_process("run", "-c", str(path), "--no-progress", stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + GUARD
    while sum(r.get("fault") == "hostile_drip" for r in dripping.requests()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()
        time.sleep(0.02)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(GUARD)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {GUARD:.0f}s after SIGTERM:\n{(tmp_path / 'stderr').read_text()}")
    stopped_after = time.monotonic() - signalled
    stderr_text = (tmp_path / "stderr").read_text()
    assert proc.returncode == 130, stderr_text
    assert one_line(stderr_text).startswith("etl: interrupted")
    summary = summary_of(out)
    assert summary["status"] == "interrupted" and summary["stopped"] == "signal"
    # Cancelled on the workers after the stop's grace, not failed at retry.deadline (300 s):
    assert summary["failed_window_count"] == 0 and summary["windows_not_done"] > 0, summary
    assert stopped_after < 30, stopped_after  # the grace, the writing, and a loaded machine

    dripping.set_faults(reset=True)
    dripping.set_capacity(2, service_time=0.02, queue_max=1)
    dripping.clear_requests()
    result = etl("run", "-c", str(path), "--json", "--no-progress", timeout=GUARD)
    assert result.returncode == 0, result.stderr
    assert_exact(out, START, END, series=["raw"])
    assert not [r for r in dripping.requests() if r.get("fault") == "shed"]
    capacity = json.loads(result.stdout)["capacity"]
    assert capacity["concurrency"] == {"min": 2, "median": 2, "max": 2} and capacity["refused"] == 0
