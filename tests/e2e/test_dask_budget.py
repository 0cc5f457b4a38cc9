"""A run on a Dask cluster that shares no disk (tests/support/dask.py: each worker in a mount namespace of
its own), with its output and state on S3 (moto): one limit on the requests in flight for the whole
cluster (etl/pipeline/cluster.py), and a run that ends: without workers, after `executor.worker_wait`,
with one line and exit 4; on SIGTERM or at `retry.run_deadline`, within seconds, the slabs on the workers
stopped with their stuck windows left open and the next run exact; Iceberg tables with their catalog in
PostgreSQL and a worker killed mid-run. Bounds are asserted from the run's own record; a wall-clock guard
only turns a hang into a failure. All but the first start workers of their own and take a minute:
`make test-cluster` runs them, after make test in .ci/run, and `make soak`."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from etl.config import parse_config
from etl.storage.atomic import Storage
from etl_emulator.faults import Faults
from etl_emulator.server import RunningEmulator, run_emulator
from tests.e2e.test_iceberg_catalog import VARIABLE, lake_config
from tests.e2e.test_iceberg_catalog import assert_exact as assert_lake_exact
from tests.support.checks import assert_exact
from tests.support.cli import etl, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.dask import PrivateWorkers, namespaces
from tests.support.emulator import START, emulator_config, series_requests

END = "2026-11-03T00:00:00Z"  # two days of raw series: a few slabs a worker
GUARD = 60.0  # seconds: only a hang comes near it


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("etl: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def summary_of(out: str) -> dict:
    storage = Storage(out)
    (path,) = storage.find("_runs")
    return json.loads(storage.read(path) or b"")


@pytest.fixture
def scheduler() -> Iterator[str]:
    """A Dask scheduler in this process, without workers."""
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


@pytest.fixture
def workers(scheduler, tmp_path) -> Iterator[PrivateWorkers]:
    """Workers for `scheduler`, none started yet, each sharing no disk with this process or the others."""
    reason = namespaces()
    if reason:
        pytest.skip(f"workers in mount namespaces of their own: {reason}")
    private = PrivateWorkers(scheduler, tmp_path / "workers.log", hidden=(VARIABLE,))
    try:
        yield private
    finally:
        private.close()


def share_no_disk(workers: PrivateWorkers, count: int, tmp_path) -> dict[str, str]:
    """Once `count` workers are up: nothing the coordinator wrote locally is there for them, nor is
    anything of theirs shared; their addresses by name."""
    from distributed import Client

    (tmp_path / "seen").write_text("a file of the coordinator's")
    with Client(workers.address, timeout=GUARD) as client:
        client.wait_for_workers(count, timeout=GUARD)
        assert set(client.run(os.path.exists, str(tmp_path / "seen")).values()) == {False}
        assert len(set(client.run(lambda: os.stat("/tmp").st_dev).values())) == count
        return {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}


def test_a_scheduler_without_workers_ends_the_run_after_executor_worker_wait(emulator, scheduler, tmp_path):
    out = tmp_path / "out"
    data = config_dict(
        emulator.base_url, out, executor={"kind": "dask", "address": scheduler, "worker_wait": "1s"}
    )
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--no-progress", timeout=GUARD)
    assert result.returncode == 4, result.stderr
    line = one_line(result.stderr)
    assert f"the Dask cluster at {scheduler} has had no worker for 1s (executor.worker_wait)" in line
    summary = summary_of(str(out))
    assert summary["status"] == "failed" and summary["seconds"] < 1 + 30  # the wait, and a loaded machine
    assert not (out / "raw").exists()


@pytest.fixture
def dripping() -> Iterator[RunningEmulator]:
    """Half the series answers never end (a byte a second)."""
    with run_emulator(emulator_config(faults=Faults(hostile=["drip"], hostile_rate=0.5, seed=1))) as emu:
        yield emu


def stuck_run_config(
    dripping: RunningEmulator, workers: PrivateWorkers, out: str, tmp_path, **sections: dict
) -> Path:
    """Two days of raw series from the dripping server, 2 requests in flight, on `workers`' cluster."""
    data = config_dict(
        dripping.base_url,
        out,
        series=["raw"],
        window={"end": END},
        extract={"concurrency": 2},
        executor={"kind": "dask", "address": workers.address},
        **sections,
    )
    return write_config(tmp_path / "c.yaml", data)


@pytest.mark.slow  # make test-cluster
def test_sigterm_stops_a_dask_run_within_seconds_and_the_next_run_is_exact(
    dripping, workers, bucket, tmp_path
):
    """Every slab on the workers holds a stuck answer: the stop reaches them, their stuck windows are
    cancelled and stay open. The next run, against a server of 2 workers that refuses (503) past one
    request waiting, with `extract.concurrency: 2`: every task's client and the coordinator's share those
    2, so the server never refuses, and the summary's figures are the cluster's limit."""
    for _ in range(2):
        workers.start()  # the run waits for them (executor.worker_wait)
    out = f"{bucket}/out"
    path = stuck_run_config(dripping, workers, out, tmp_path)
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
    share_no_disk(workers, 2, tmp_path)

    dripping.set_faults(reset=True)
    dripping.set_capacity(2, service_time=0.02, queue_max=1)
    dripping.clear_requests()
    result = etl("run", "-c", str(path), "--json", "--no-progress", timeout=GUARD)
    assert result.returncode == 0, result.stderr
    assert_exact(out, START, END, series=["raw"])
    assert not [r for r in dripping.requests() if r.get("fault") == "shed"]
    capacity = json.loads(result.stdout)["capacity"]
    assert capacity["concurrency"] == {"min": 2, "median": 2, "max": 2} and capacity["refused"] == 0


@pytest.mark.slow  # make test-cluster
def test_iceberg_on_s3_from_workers_that_share_no_disk_is_exact_with_one_killed(
    fresh_emulator, workers, bucket, postgres, tmp_path, monkeypatch
):
    """3 workers of 2 threads, Iceberg tables on S3 with their catalog in PostgreSQL; one worker's whole
    process group SIGKILLed while it runs a slab, and a fresh worker joining."""
    from distributed import Client

    for _ in range(3):
        workers.start()
    address = share_no_disk(workers, 3, tmp_path)["w0"]
    monkeypatch.setenv(VARIABLE, postgres.password)
    data = lake_config(
        fresh_emulator.base_url,
        bucket,
        postgres,
        window={"end": END},
        executor={"kind": "dask", "address": workers.address},
    )
    path = write_config(tmp_path / "c.yaml", data)
    fresh_emulator.set_faults(latency=0.2)  # slabs last long enough to lose one mid-way
    with Client(workers.address, timeout=GUARD) as client:
        with open(tmp_path / "stderr", "wb") as stderr:
            run = etl_process("run", "-c", str(path), "--json", "--no-progress", stderr=stderr)
        try:
            deadline = time.monotonic() + GUARD
            while not (series_requests(fresh_emulator) and client.processing([address])[address]):
                assert run.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()
                time.sleep(0.05)
            workers.kill(0)
            workers.start()
            stdout, _ = run.communicate(timeout=2 * GUARD)
            assert run.returncode == 0, (tmp_path / "stderr").read_text()
        finally:
            run.kill()
    summary = json.loads(stdout)
    assert summary["status"] == "ok" and summary["windows_not_done"] == 0
    assert_lake_exact(parse_config(data), START, END)


@pytest.mark.slow  # make test-cluster
def test_run_deadline_stops_a_dask_run_as_sigterm_does(dripping, workers, bucket, tmp_path):
    """`retry.run_deadline` reaches the slabs on the workers as a signal does: their stuck windows are
    cancelled after the stop's grace and stay open, the run ends with the deadline's one line (exit 4),
    and the next run is exact."""
    for _ in range(2):
        workers.start()
    share_no_disk(workers, 2, tmp_path)  # up before the deadline's clock starts
    out = f"{bucket}/out"
    path = stuck_run_config(dripping, workers, out, tmp_path, retry={"run_deadline": 8})
    result = etl("run", "-c", str(path), "--no-progress", timeout=GUARD)
    assert result.returncode == 4, result.stderr
    assert "the run reached its deadline (retry.run_deadline, 8s): stopped" in one_line(result.stderr)
    summary = summary_of(out)
    assert summary["stopped"] == "run_deadline" and summary["seconds"] < 8 + 30  # a loaded machine's slack
    assert sum(r.get("fault") == "hostile_drip" for r in dripping.requests()) >= 1  # stuck on the workers
    assert summary["failed_window_count"] == 0 and summary["windows_not_done"] > 0, summary

    dripping.set_faults(reset=True)
    result = etl("run", "-c", str(path), "--no-progress", timeout=GUARD)
    assert result.returncode == 0, result.stderr
    assert_exact(out, START, END, series=["raw"])
