"""Object storage: runs into s3:// against a real S3-compatible server (moto) on loopback, no mocked client."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from etl.cli import cli
from etl.config import parse_config
from etl.errors import LockedError, StorageError
from etl.pipeline.build import Build
from etl.storage.atomic import Storage
from etl.timeutil import to_ms
from tests.support.checks import assert_exact
from tests.support.cli import etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SOURCE, expected_table
from tests.support.output import checkpoints
from tests.support.pipeline import run


def test_full_then_incremental_run_into_s3(emulator, bucket, tmp_path, monkeypatch):
    lake = f"{bucket}/lake"
    middle = "2026-11-02T06:00:00Z"
    run(make_config(emulator.base_url, lake, window={"end": middle}))
    assert_exact(lake, START, middle)
    summary = run(make_config(emulator.base_url, lake)).as_dict()
    assert summary["series"]["raw"]["windows"] == 8  # only what the first run did not cover
    assert (
        summary["catalog"]["objects_listed"] == 0 and summary["parameters"] == 8
    )  # the catalog, read from S3
    assert_exact(lake, START, END)

    storage = Storage(lake)
    files = storage.find()
    assert any(f.startswith(f"_state/{SOURCE}/") for f in files)
    assert len([f for f in files if f.startswith(f"_state/{SOURCE}/catalog/")]) == 1
    assert f"_state/{SOURCE}/lock" not in files  # the lease is released
    assert any(f.startswith("_runs/") for f in files)
    assert not any(name.rsplit("/", 1)[-1].startswith(".") for name in files)  # no temp names on S3
    raw = [f for f in files if f.startswith("raw/")]
    assert {f.rsplit("/", 1)[0] for f in raw} == {"raw/date=2026-11-01", "raw/date=2026-11-02"}
    assert all(f.rsplit("/", 1)[1].startswith(f"part-{SOURCE}-b") for f in raw)
    assert not list(tmp_path.iterdir())  # nothing written locally

    # The same lake through sink.storage_options alone, without AWS_ENDPOINT_URL: a rerun finds
    # the checkpoints and fetches nothing.
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    again = run(make_config(emulator.base_url, lake, sink={"storage_options": {"endpoint_url": endpoint}}))
    assert again.as_dict()["points"] == 0 and again.as_dict()["objects"] == 2


def test_a_missing_bucket_is_one_clear_output_error(emulator, s3_server):
    with pytest.raises(
        StorageError, match=r"^cannot write s3://etl-no-such-bucket/lake: .*bucket does not exist"
    ):
        run(make_config(emulator.base_url, "s3://etl-no-such-bucket/lake"))


def test_conditional_writes_lose_no_concurrent_update(bucket):
    """Storage.update on S3 is a compare-and-swap: 4 writers x 10 increments of one object give 40."""
    Storage(bucket).write_atomic("counter", b"0")

    def bump() -> None:
        storage = Storage(bucket)
        for _ in range(10):
            storage.update("counter", lambda data: str(int(data) + 1).encode(), attempts=50)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Storage(bucket).read("counter") == b"40"


def test_killed_run_resumes_from_s3_checkpoints(fresh_emulator, bucket, tmp_path):
    """SIGKILL an `etl run` mid-way: its lease blocks a successor until it expires, then the next run
    finishes the job and the lake holds every point exactly once."""
    lake = f"{bucket}/lake"
    end = "2026-11-05T00:00:00Z"
    data = config_dict(
        fresh_emulator.base_url, lake, window={"end": end}, extract={"concurrency": 2}, state={"lease": "2s"}
    )
    fresh_emulator.set_faults(latency=0.05)
    storage = Storage(lake)
    victim = etl_process(
        "run", "-c", str(write_config(tmp_path / "c.yaml", data)), "--no-progress", stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not storage.find(f"_state/{SOURCE}/log"):  # the first slab is written and checkpointed
            assert victim.poll() is None and time.monotonic() < deadline, (
                victim.stderr and victim.stderr.read()
            )
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        victim.kill()
        victim.stderr.close()
    covered = checkpoints(lake)
    done = int((covered.end - covered.start).sum())
    assert 0 < done < 8 * 3 * (to_ms(end) - to_ms(START))  # killed mid-way

    config = parse_config(data)
    store = Build(config).state_store()
    with pytest.raises(LockedError, match="another run holds the state lock"), store.lock():
        pass
    time.sleep(2.1)  # the dead run's lease expires
    fresh_emulator.set_faults(reset=True)
    assert run(config).status == "ok"
    assert_exact(lake, START, end)
    assert storage.read(f"_state/{SOURCE}/lock") is None


def test_query_over_s3(emulator, bucket, tmp_path):
    lake = f"{bucket}/lake"
    run(make_config(emulator.base_url, lake))
    path = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, lake))
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "query",
            "-c",
            str(path),
            "select count(*) as n, count(distinct param_name) as names from raw_named",
        ],
    )
    assert result.exit_code == 0, result.output
    want = expected_table(emulator_config(), "raw", to_ms(START), to_ms(END)).num_rows
    assert result.output.splitlines()[1].split() == [str(want), "8"] and result.output.endswith("(1 row)\n")
    out = tmp_path / "candles.parquet"
    result = runner.invoke(
        cli, ["query", "-c", str(path), "select * from candles order by param_id, ts", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    import pyarrow.parquet as pq

    assert (
        pq.read_table(out).num_rows
        == expected_table(emulator_config(), "candles", to_ms(START), to_ms(END)).num_rows
    )
    assert Path(out).stat().st_size > 0
