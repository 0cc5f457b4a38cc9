"""A server of limited capacity (the emulator's --capacity: workers, a queue, 503 past its length) and
etl's limit on requests in flight (`extract.concurrency: auto`, etl/client/concurrency.py): the emulator
queues and sheds as it says, the limit grows to what the server takes and no further, a server that
sheds loses no window, and `extract.max_rps` caps the requests a second."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from etl_emulator.faults import Faults
from etl_emulator.server import run_emulator
from tests.support.cli import etl
from tests.support.configs import config_dict, write_config
from tests.support.emulator import emulator_config, series_requests


def _in_parallel(base_url: str, count: int) -> list[int]:
    """`count` sign-ins sent at once: their statuses."""
    statuses: list[int] = []

    def one() -> None:
        answer = httpx.post(
            base_url + "/auth/login", params={"username": "demo", "password": "demo"}, timeout=30
        )
        statuses.append(answer.status_code)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        threading.Event().wait(0.01)


def test_the_emulator_queues_past_its_workers_and_sheds_past_its_queue():
    """One worker and room for one in its queue: a second request waits for the first one's worker, and a
    third that comes meanwhile is refused at once. The first holds its worker until this test sends the
    rest of its body (a sign-in's form is read by the worker), so no time decides the order."""
    with run_emulator(emulator_config(faults=Faults(capacity=1, queue_max=1))) as emu:
        workers, statuses = emu.app.workers, []
        body = b"username=demo&password=demo"
        url = httpx.URL(emu.base_url + "/auth/login")
        with socket.create_connection((url.host, url.port)) as first:
            first.sendall(
                f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            _until(lambda: workers.busy == 1)
            second = threading.Thread(target=lambda: statuses.extend(_in_parallel(emu.base_url, 1)))
            second.start()
            _until(lambda: len(workers.waiting) == 1)
            shed = _in_parallel(emu.base_url, 1)
            first.sendall(body)
            answer = first.makefile("rb").readline()
        second.join()
        log = emu.requests()
    assert shed == [503] and answer.split()[1] == b"200" and statuses == [200]
    assert sorted((e["status"], str(e.get("fault"))) for e in log) == [
        (200, "None"),
        (200, "None"),
        (503, "shed"),
    ]


def test_a_larger_capacity_takes_the_waiting_requests_at_once():
    with run_emulator(emulator_config(faults=Faults(capacity=1, service_time=3.0))) as emu:
        waiting = threading.Thread(target=_in_parallel, args=(emu.base_url, 3))
        waiting.start()
        while emu.app.workers.busy < 1 or len(emu.app.workers.waiting) < 2:
            threading.Event().wait(0.01)
        emu.set_capacity(3)
        waiting.join()
        log = emu.requests()
        with pytest.raises(httpx.HTTPStatusError, match="400"):
            emu.set_capacity(0)
    # The two that waited started long before the first one's 3 s were over.
    assert [e["queue_ms"] < 2000 for e in log] == [True, True, True]


FLEET = {"objects": 6, "params_per_object": 6, "calc_per_object": 2}  # 48 parameters


def _run(base_url: str, tmp_path: Path, **extract: object) -> dict:
    """`etl run --json` in its own process (the emulator's thread keeps this one's GIL): the summary."""
    data = config_dict(base_url, tmp_path / "out", extract=extract)
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--json", "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_auto_grows_to_what_the_server_takes_and_no_further(tmp_path):
    """A server of 8 workers busy 100 ms each: the limit, from 4, reaches them and stays near."""
    with run_emulator(emulator_config(**FLEET, faults=Faults(capacity=8, service_time=0.1))) as emu:
        summary = _run(emu.base_url, tmp_path, concurrency="auto")
        in_server = [e["server_ms"] for e in series_requests(emu)]
    capacity = summary["capacity"]
    assert summary["failed_window_count"] == 0 and len(in_server) > 150
    assert capacity["setting"] == "auto" and capacity["max"] == 64
    used = capacity["concurrency"]
    assert used["min"] <= 4 and used["max"] >= 8 and used["median"] <= 16, used
    assert capacity["latency_ms"]["baseline"] >= 100 and capacity["latency_ms"]["p95"] >= 100
    assert capacity["refused"] == 0


def test_a_server_that_sheds_load_loses_no_window(tmp_path):
    """2 workers and no queue: the limit's first requests meet 503s; it falls, and every window is
    written after retries."""
    with run_emulator(emulator_config(faults=Faults(capacity=2, service_time=0.05, queue_max=0))) as emu:
        summary = _run(emu.base_url, tmp_path, concurrency="auto")
        shed = [e for e in emu.requests() if e.get("fault") == "shed"]
    assert summary["failed_window_count"] == 0 and summary["status"] == "ok"
    assert summary["capacity"]["refused"] == len(shed) > 0
    assert summary["capacity"]["concurrency"]["min"] <= 2
    assert summary["retries_by_reason"]["http_503"] >= len(shed)


def test_max_rps_caps_the_requests_a_second(tmp_path):
    with run_emulator(emulator_config()) as emu:
        summary = _run(emu.base_url, tmp_path, concurrency=16, max_rps=40)
        stamps = sorted(e["ts"] for e in emu.requests())
    assert summary["status"] == "ok"
    # Spaced by the cap when they went: the emulator can only see them later, never sooner.
    assert stamps[-1] - stamps[0] >= (len(stamps) - 1) * 1000 / 40 * 0.9, (
        len(stamps),
        stamps[-1] - stamps[0],
    )
