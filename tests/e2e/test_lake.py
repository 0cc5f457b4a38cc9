"""Lake tables (sink.format delta / iceberg): the checkpoint rides in the table commit and comes back
from it, maintenance while readers read, S3 (moto), config errors. The crash, fault and reader tests of
the other files run over these formats too (parametrized)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time

import pytest

from etl.config import SinkConfig
from etl.sinks.lake import Lake
from etl.sinks.lake.common import Checkpoint
from etl.storage.atomic import Storage
from tests.support.checks import assert_exact
from tests.support.cli import etl
from tests.support.configs import S3_ENV, config_dict, make_config, write_config
from tests.support.emulator import series_requests
from tests.support.expected import SOURCE
from tests.support.output import checkpoints
from tests.support.pipeline import run

LAKES = ["delta", "iceberg"]


def lake(out, fmt: str) -> Lake:
    return Lake(SinkConfig(format=fmt, path=str(out)), Storage(str(out)))


@pytest.mark.parametrize("fmt", LAKES)
def test_each_commit_carries_the_slab_checkpoint(emulator, tmp_path, fmt):
    run(make_config(emulator.base_url, tmp_path, sink={"format": fmt}))
    assert_exact(tmp_path)
    state = checkpoints(tmp_path)
    for series in ("raw", "average", "candles"):
        table = lake(tmp_path, fmt).series(series)
        found = table.history(f"etl-{SOURCE}", 0)
        assert [c.version for c in found] == list(range(1, len(found) + 1)) and found
        assert table.latest(f"etl-{SOURCE}") == len(found)
        for checkpoint in found:  # every window of the table's commits is in the state log, and back
            for w in checkpoint.windows:
                assert any(s <= w.start and w.end <= e for s, e in state.intervals(w.param_id, series))
    assert Checkpoint.parse({"operation": "OPTIMIZE"}) is None  # others' commits are not ours


@pytest.mark.parametrize("fmt", LAKES)
@pytest.mark.parametrize("lost", ["last_entries", "whole_state"])
def test_checkpoints_come_back_from_the_tables_when_the_state_is_behind(fresh_emulator, tmp_path, fmt, lost):
    """As if runs were killed between their table commits and the state log: nothing is fetched twice."""
    config = make_config(fresh_emulator.base_url, tmp_path, sink={"format": fmt}, window={"overlap": "0s"})
    run(config)
    state = tmp_path / "_state" / SOURCE
    if lost == "whole_state":
        shutil.rmtree(state)
    else:
        for segment in sorted((state / "log").glob("*.json"))[-5:]:
            segment.unlink()
    fresh_emulator.clear_requests()
    summary = run(config).as_dict()
    assert series_requests(fresh_emulator) == []  # every window came back from the commits
    assert summary["status"] == "ok"
    assert_exact(tmp_path)
    again = checkpoints(tmp_path)
    assert all(again.intervals(p, s) for p in (1001,) for s in ("raw", "average", "candles"))


@pytest.mark.parametrize("fmt", LAKES)
def test_compact_and_vacuum_while_a_reader_reads(emulator, tmp_path, fmt):
    data = config_dict(emulator.base_url, tmp_path / "out", sink={"format": fmt})
    path = write_config(tmp_path / "c.yaml", data)
    config = make_config(emulator.base_url, tmp_path / "out", sink={"format": fmt})
    run(config)
    run(config, full_refresh=True)  # a second version of every row: files to compact and vacuum
    tables = lake(tmp_path / "out", fmt)
    want = {s: tables.series(s).dataset().count_rows() for s in ("raw", "average", "candles")}
    seen, failures, stop = [], [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                now = lake(tmp_path / "out", fmt)
                seen.append({s: now.series(s).dataset().count_rows() for s in want})
            except Exception as exc:  # noqa: BLE001
                failures.append(repr(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for command in (["compact"], ["vacuum", "--retain", "0s"]):
            result = etl(*command, "-c", str(path))
            assert result.returncode == 0, result.stderr
    finally:
        stop.set()
        reader.join(10)
    assert seen and all(counts == want for counts in seen) and not failures, (failures[:3], seen[-1:])
    assert_exact(tmp_path / "out")


@pytest.fixture
def s3_process(monkeypatch):
    """moto's S3 server in a process of its own: delta-rs holds the GIL through some of its requests,
    so a server on a thread of this process (conftest's s3_server) could not answer them."""
    import socket

    import s3fs

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": url}.items():
        monkeypatch.setenv(key, value)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True).mkdir("lake-bucket")
                break
            except OSError:
                assert time.monotonic() < deadline, "moto did not start"
                time.sleep(0.2)
        yield "s3://lake-bucket"
    finally:
        server.terminate()
        server.wait(10)


def test_delta_on_s3_with_conditional_put(emulator, s3_process, tmp_path):
    out = f"{s3_process}/lake"
    config = make_config(emulator.base_url, tmp_path, sink={"format": "delta", "path": out})
    run(config)
    emulator.clear_requests()
    run(config, full_refresh=True)
    assert_exact(out)
    table = lake(out, "delta").series("raw")
    assert table.options["conditional_put"] == "etag"  # commits are PUT-if-absent, never a rename
    assert (
        table.latest(f"etl-{SOURCE}") == 2
    )  # two runs: their 8 raw slabs (2 days x 4 buckets) in one commit each


@pytest.mark.parametrize(
    "sink, message",
    [
        ({"format": "parquet", "catalog": "sqlite:///x.db"}, "only sink.format iceberg has a catalog"),
        ({"format": "iceberg", "catalog": "ftp://x"}, "give a REST catalog URI"),
        ({"format": "iceberg", "path": "s3://bucket/lake"}, "iceberg on an object store needs sink.catalog"),
    ],
)
def test_bad_lake_config_is_one_line(tmp_path, sink, message):
    data = config_dict("http://127.0.0.1:1/api", tmp_path / "out", sink=sink)
    path = write_config(tmp_path / "c.yaml", data)
    result = etl("plan", "-c", str(path))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "sink" in result.stderr


def test_vacuum_of_files_is_refused_in_one_line(tmp_path):
    path = write_config(tmp_path / "c.yaml", config_dict("http://127.0.0.1:1/api", tmp_path / "out"))
    result = etl("vacuum", "-c", str(path))
    assert result.returncode == 2 and "etl vacuum is for lake tables" in result.stderr
