"""Distributed execution on a dask.distributed LocalCluster of separate worker processes. What a
job shows of the config, without a cluster: tests/unit/pipeline/test_dask_jobs.py."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pytest

from etl.errors import ConfigError
from tests.support.checks import assert_exact
from tests.support.cli import etl
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START, series_requests
from tests.support.expected import SERIES
from tests.support.output import checkpoints, read, read_quality
from tests.support.pipeline import run
from tests.support.postgres import database, sink


def files(root) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.parts[len(root.parts)] not in ("_runs", "_state") and not p.name.startswith(".")
    )


def test_dask_executor_writes_row_for_row_what_the_local_one_writes(emulator, dask_cluster, tmp_path):
    run(make_config(emulator.base_url, tmp_path / "local"))
    # A relative output path: workers get it made absolute, whatever their working folder.
    path = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, "lake"))
    scheduler = dask_cluster.scheduler_address
    result = etl("run", "-c", str(path), "--scheduler", scheduler, "--json", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["executor"] == f"dask {dask_cluster.scheduler_address}"
    assert summary["requests"] >= sum(
        s["windows"] for s in summary["series"].values()
    )  # workers' counts folded in
    local, remote = tmp_path / "local", tmp_path / "lake"
    for series in SERIES:
        assert read(remote, series).equals(read(local, series)), series
    assert files(remote) == files(local)
    assert list(checkpoints(remote).rows()) == list(checkpoints(local).rows())


def test_dask_workers_write_their_part_files_to_s3(emulator, dask_cluster, bucket):
    """The workers get the coordinator's resolved storage options (the endpoint of AWS_ENDPOINT_URL);
    credentials come from the config's storage_options here, from their own environment in production."""
    lake = f"{bucket}/lake"
    config = make_config(
        emulator.base_url,
        lake,
        sink={"storage_options": {"key": "testing", "secret": "testing"}},
        executor={"kind": "dask", "address": dask_cluster.scheduler_address},
    )
    assert run(config).as_dict()["executor"].startswith("dask")
    assert_exact(lake, START, END)


def test_dask_without_a_scheduler_is_a_config_error(emulator, tmp_path):
    with pytest.raises(ConfigError, match="needs --scheduler ADDRESS"):
        run(make_config(emulator.base_url, tmp_path), executor="dask")
    assert not (tmp_path / "_state").exists()  # refused before taking the lock


def test_a_worker_killed_mid_write_costs_nothing_but_time(fresh_emulator, dask_cluster, tmp_path):
    """A worker process is SIGKILLed right after writing the first partition file of its slab: windows
    fetched, the slab half written, nothing checkpointed. Dask reschedules the slab on a worker that
    fetches and writes it again; the output holds every point exactly once."""
    from distributed import Client, WorkerPlugin

    marker = tmp_path / "killed"

    class KillMidWrite(WorkerPlugin):  # defined here so that it travels by value to the workers
        name = "kill-mid-write"

        def setup(self, worker):
            from etl.storage.atomic import Storage

            self.original = original = Storage.commit

            def commit(storage, rel, *args, **kwargs):
                result = original(storage, rel, *args, **kwargs)
                if rel.endswith(".parquet"):
                    try:
                        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))  # one kill in all
                    except FileExistsError:
                        return result
                    os.kill(os.getpid(), signal.SIGKILL)
                return result

            Storage.commit = commit

        def teardown(self, worker):
            from etl.storage.atomic import Storage

            Storage.commit = self.original

    end = "2026-11-05T00:00:00Z"
    address = dask_cluster.scheduler_address
    config = make_config(
        fresh_emulator.base_url,
        tmp_path / "out",
        window={"end": end},
        executor={"kind": "dask", "address": address},
    )
    with Client(address, timeout=30) as client:
        client.register_plugin(KillMidWrite())
        try:
            summary = run(config).as_dict()
        finally:
            client.unregister_worker_plugin(KillMidWrite.name)
    assert marker.exists()
    assert summary["status"] == "ok" and summary["failed_window_count"] == 0
    assert_exact(tmp_path / "out", START, end)
    # The killed slab was redone by another worker: its windows were requested twice.
    twice = [path for path, n in Counter(r["path"] for r in series_requests(fresh_emulator)).items() if n > 1]
    assert twice


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_dask_workers_write_lake_tables_row_for_row_what_a_local_run_writes(
    emulator, dask_cluster, tmp_path, fmt
):
    """Workers write data files into the tables; the coordinator commits them, with their checkpoints, in
    grouped commits. A second run replaces every window: the workers' files replace stored rows."""
    local, remote = tmp_path / "local", tmp_path / "dask"
    run(make_config(emulator.base_url, local, sink={"format": fmt}))
    config = make_config(emulator.base_url, remote, sink={"format": fmt})
    for full_refresh in (False, True):
        summary = run(
            config, executor="dask", scheduler=dask_cluster.scheduler_address, full_refresh=full_refresh
        ).as_dict()
        assert summary["executor"].startswith("dask")
        for series in SERIES:
            assert read(remote, series).equals(read(local, series)), series
        assert read_quality(remote).equals(read_quality(local))
        assert list(checkpoints(remote).rows()) == list(checkpoints(local).rows())
        assert summary["lake"]["commits"] == 3
        assert all(summary["series"][s]["files"] > 0 for s in SERIES), summary["series"]  # the commits' files
    if fmt == "delta":  # the workers' files (etl/sinks/lake/delta_files.py), not delta-rs's own
        assert list((remote / "raw").glob("date=*/part-00000-*-c000.zstd.parquet"))


def test_dask_workers_write_postgres_tables_exactly(emulator, dask_cluster, postgres, tmp_path):
    """Workers COPY their slabs' rows into stage tables; the coordinator moves them in, with their
    checkpoints, in grouped transactions (each deleting what its windows cover first): exact."""
    remote = tmp_path / "dask"
    config = make_config(emulator.base_url, remote, sink=sink(postgres, remote))
    summary = run(config, executor="dask", scheduler=dask_cluster.scheduler_address).as_dict()
    assert summary["executor"].startswith("dask")
    assert_exact(remote, START, END)
    quality = read_quality(remote)
    assert quality.num_rows == 8 * 2 and quality.column("completeness").null_count == 0
    assert len(list(checkpoints(remote).rows())) == 8 * len(SERIES)
    assert summary["lake"]["commits"] == 3
    stages = database(remote).rows(  # type: ignore[attr-defined]
        "select count(*) from pg_tables where schemaname = $1 and tablename like '\\_etl\\_stage\\_%'",
        (config.sink.db_schema,),
    )
    assert stages == [(0,)]  # every worker's stage table was moved in and dropped
