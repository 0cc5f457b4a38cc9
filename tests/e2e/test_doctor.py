"""`etl doctor` passes a healthy deployment and flags each unhealthy state, each made on purpose here: the
server against the config, checkpoints past now or ahead of the source, failed and stale runs, stale
locks, leftovers of killed runs, crowded partitions, lake tables that need maintenance, one instance under
two source names."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from etl.cli import main
from etl.config import load_config
from etl.model import ParamKind, Series, Window, Windows
from etl.ops.doctor import Deployment, Limits, diagnose, locks
from etl.pipeline.build import Build
from etl.timeutil import DAY_MS, HOUR_MS, now_ms, to_ms
from etl_emulator.server import run_emulator
from tests.support.cli import etl as etl_cli
from tests.support.configs import config_dict, write_config
from tests.support.emulator import emulator_config
from tests.support.output import read

NOT_RAW = ["average", "candles"]


def etl(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code, capsys.readouterr().out


@pytest.fixture(autouse=True)
def private_temp(tmp_path, monkeypatch) -> str:
    """Spools go to (and are looked for in) a temp folder of the test's own."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def baseline(emulator, tmp_path_factory) -> Path:
    """One healthy run (the conftest window, 2 objects), copied by each test that breaks something."""
    root = tmp_path_factory.mktemp("doctor")
    path = write_config(root / "c.yaml", config_dict(emulator.base_url, root / "out"))
    with pytest.raises(SystemExit) as exit_info:
        main(["-q", "run", "-c", str(path), "--no-progress"])
    assert exit_info.value.code == 0
    return root


def deployment(baseline: Path, tmp_path: Path, **sections) -> tuple[Path, Path]:
    """A copy of the healthy deployment; its config, with `sections` changed. (config path, output)."""
    out = tmp_path / "out"
    shutil.copytree(baseline / "out", out)
    data = config_dict("", out, **sections)
    data["source"] = {**yaml_source(baseline), **sections.get("source", {})}
    return write_config(tmp_path / "c.yaml", data), out


def yaml_source(baseline: Path) -> dict:
    import yaml

    return yaml.safe_load((baseline / "c.yaml").read_text())["source"]


def checks(path: Path, limits: Limits | None = None, **kw) -> dict[str, list[dict]]:
    """The findings of diagnose, by check: [{status, message, fix}]."""
    diagnosis = diagnose(load_config(path), str(path), limits, **kw)
    found: dict[str, list[dict]] = {}
    for f in diagnosis.findings:
        found.setdefault(f.check, []).append(f.as_dict())
    return found


def statuses(found: dict[str, list[dict]]) -> dict[str, set[str]]:
    return {check: {f["status"] for f in items} for check, items in found.items()}


def test_a_healthy_deployment_passes(baseline, capsys):
    path = baseline / "c.yaml"
    code, out = etl(capsys, "doctor", "-c", str(path), "--json", "--max-age", "1h")
    body = json.loads(out)
    assert code == 0 and body["healthy"] and body["status"] == "ok", body
    assert {f["status"] for f in body["findings"]} == {"ok"}
    assert {
        "server.base_url",
        "server.sign_in",
        "server.count",
        "checkpoints.now",
        "checkpoints.source",
        "runs.last",
        "runs.age",
        "locks",
        "leftovers.temp",
        "leftovers.spool",
        "files",
        "sources",
    } <= {f["check"] for f in body["findings"]}
    assert 0 < body["requests_made"] <= 50
    code, out = etl(capsys, "doctor", "-c", str(path), "--offline")
    assert code == 0 and "server" not in out and out.count("\n") >= 8


def test_a_config_that_disagrees_with_the_server(emulator, fresh_emulator, baseline, tmp_path, capsys):
    path, _ = deployment(baseline, tmp_path, source={"base_url": emulator.url})  # the base path left out
    found = checks(path, skip=("checkpoints",))
    assert statuses(found)["server.base_url"] == {"fail"}
    assert found["server.base_url"][0]["fix"] == f"set source.base_url: {emulator.base_url}"

    fresh_emulator.set_faults(sign_in_via="form", max_count=500)
    path, _ = deployment(
        baseline, tmp_path / "form", source={"base_url": fresh_emulator.base_url}, extract={"concurrency": 1}
    )
    found = checks(path, skip=("checkpoints",))
    assert found["server.sign_in"][0]["fix"] == "set source.sign_in: form"
    assert found["server.count"][0]["fix"] == "set extract.max_points: 500"
    assert statuses(found)["server.sign_in"] == {"fail"} and statuses(found)["server.count"] == {"warn"}
    code, out = etl(capsys, "doctor", "-c", str(path))
    assert code == 10 and "FAIL  server.sign_in" in out and "-> set source.sign_in: form" in out

    fresh_emulator.set_faults(reset=True)
    path, _ = deployment(
        baseline, tmp_path / "pw", source={"base_url": fresh_emulator.base_url, "password": "x"}
    )
    found = checks(path, skip=("checkpoints",))
    assert (
        statuses(found)["server"] == {"fail"}
        and "check the username and password" in found["server"][0]["message"]
    )


def test_an_https_url_to_an_http_server_fails_the_server_check_with_one_tls_line(
    emulator, baseline, tmp_path
):
    https = emulator.base_url.replace("http://", "https://")
    path, _ = deployment(baseline, tmp_path, source={"base_url": https})
    [finding] = checks(path, skip=("checkpoints",))["server"]
    assert finding["status"] == "fail" and finding["message"].startswith(
        f"TLS: no TLS handshake with {https}"
    )


def test_checkpoints_past_now(baseline, tmp_path):
    path, _ = deployment(baseline, tmp_path)
    store = Build(load_config(path)).state_store()
    store.load()
    year_2030 = to_ms("2030-01-01T00:00:00Z")
    store.commit(
        Windows.of(
            Series.RAW, [Window(1001, 1, ParamKind.PHYSICAL, Series.RAW, year_2030 - DAY_MS, year_2030)]
        )
    )
    found = checks(path, server=False)
    assert statuses(found)["checkpoints.now"] == {"fail"}
    assert "2030-01-01" in found["checkpoints.now"][0]["message"]
    assert (
        "etl state reset -c" in found["checkpoints.now"][0]["fix"]
        and "--param 1001" in found["checkpoints.now"][0]["fix"]
    )


def test_checkpoints_ahead_of_the_source(tmp_path, capsys):
    """The server's clock is behind and it sends no Date header, so a run cannot know: it checkpoints up
    to its window's end, the server has data only up to its clock; once the server catches up (past
    window.late_max), the points behind the checkpoints are missing and no run reads them again. (A server
    that tells its clock never gets there: test_future_end; one within late_max: test_late_data.)"""
    with run_emulator(emulator_config(now_ms=to_ms("2026-11-02T12:00:00Z"), date_header=False)) as emulator:
        data = config_dict(emulator.base_url, tmp_path / "out", series=["raw"])
        path = write_config(tmp_path / "c.yaml", data)
        assert etl(capsys, "-q", "run", "-c", str(path), "--no-progress")[0] == 0
        assert statuses(checks(path, skip=("runs",)))["checkpoints.source"] == {"ok"}  # nothing seen yet
        emulator.set_clock(to_ms("2026-11-20T00:00:00Z"))
        found = checks(path, skip=("runs",))
    assert statuses(found)["checkpoints.source"] == {"fail"}
    message, fix = found["checkpoints.source"][0]["message"], found["checkpoints.source"][0]["fix"]
    assert "the output lacks" in message and "--full-refresh --from 2026-11-02" in fix


def _drop(out: Path, pid: int, start: int, end: int) -> None:
    """Take a parameter's raw rows in [start, end) out of the files, as if they had never been served."""
    for file in (out / "raw").rglob("*.parquet"):
        table = pq.read_table(file)
        ts = pc.cast(table.column("ts"), pa.int64())
        gone = pc.and_(
            pc.equal(table.column("param_id"), pid), pc.and_(pc.greater_equal(ts, start), pc.less(ts, end))
        )
        if pc.any(gone).as_py():
            pq.write_table(table.filter(pc.invert(gone)), file)


def test_points_out_of_order_are_caught_by_the_source_check(tmp_path, capsys):
    """A point that reaches the server before a newer one already read (out of order) is behind the
    newest point: no run reads it again without window.overlap, and the source check says so."""
    with run_emulator(emulator_config()) as emulator:
        data = config_dict(emulator.base_url, tmp_path / "out", series=["raw"])
        path = write_config(tmp_path / "c.yaml", data)
        assert etl(capsys, "-q", "run", "-c", str(path), "--no-progress")[0] == 0
        # a point that was not there: into the last checkpointed day, well before the newest point
        pid = 1001
        out = tmp_path / "out"
        raw = read(out, "raw")
        stamps = pc.cast(raw.filter(pc.equal(raw.column("param_id"), pid)).column("ts"), pa.int64())
        last_day = int(stamps[-1].as_py()) // DAY_MS * DAY_MS
        _drop(out, pid, last_day + HOUR_MS, last_day + 2 * HOUR_MS)
        found = checks(path, skip=("runs",))
    assert statuses(found)["checkpoints.source"] == {"fail"}
    message, fix = found["checkpoints.source"][0]["message"], found["checkpoints.source"][0]["fix"]
    assert "out of order" in message and "--full-refresh --from" in fix and "window.overlap" in fix


def _record(out: Path, **changes) -> dict:
    runs = sorted((out / "_runs").glob("*.json"))
    record = {**orjson.loads(runs[-1].read_bytes()), **changes}
    (out / "_runs" / f"{record['run_id']}.json").write_bytes(orjson.dumps(record))
    return record


def test_failed_windows_and_a_stale_schedule(baseline, tmp_path):
    path, out = deployment(baseline, tmp_path)
    windows = ["param 1001 raw 2026-11-01T00:00:00.000Z..2026-11-02T00:00:00.000Z"]
    _record(
        out, run_id="29990101T000000Z-aaaaaa", status="failed", failed_window_count=1, failed_windows=windows
    )
    found = checks(path, server=False)
    assert statuses(found)["runs.last"] == {"fail"} and "param 1001 raw" in found["runs.last"][0]["message"]

    path, out = deployment(baseline, tmp_path / "old")
    found = checks(path, Limits(max_age_ms=HOUR_MS), server=False, now=now_ms() + DAY_MS)
    assert (
        statuses(found)["runs.age"] == {"fail"}
        and "more than --max-age 1h" in found["runs.age"][0]["message"]
    )
    assert statuses(checks(path, Limits(max_age_ms=HOUR_MS), server=False))["runs.age"] == {"ok"}


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_lock_held_for_a_run_that_is_gone(baseline, tmp_path):
    path, _ = deployment(baseline, tmp_path)
    store = Build(load_config(path)).state_store()
    lock = store.storage.full("lock")
    holder = {"pid": _dead_pid(), "host": socket.gethostname(), "since": "2026-11-25T00:00:00.000Z"}
    Path(lock).write_text(json.dumps(holder))
    assert statuses(checks(path, server=False))["locks"] == {"ok"}  # the file alone: released
    fd = os.open(lock, os.O_RDONLY)  # as a process the dead run started would keep it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        found = checks(path, server=False)
    finally:
        os.close(fd)
    assert statuses(found)["locks"] == {"fail"} and "fuser" in found["locks"][0]["fix"]


def test_a_lease_left_on_an_object_store(baseline, tmp_path):
    path, _ = deployment(
        baseline, tmp_path, state={"path": f"memory://doctor-{os.getpid()}-{time.time_ns()}"}
    )
    config = load_config(path)
    store = Build(config).state_store()
    now = now_ms()
    held = {
        "pid": _dead_pid(),
        "host": socket.gethostname(),
        "since": "2026-11-25T00:00:00.000Z",
        "token": "t",
    }
    store.storage.write_atomic("lock", json.dumps({**held, "expires": now / 1000 + 3600}).encode())
    found = locks(Deployment(config, str(path), Limits(), now))
    assert [f.status for f in found] == ["fail"] and "until" in found[0].message
    store.storage.write_atomic("lock", json.dumps({**held, "expires": now / 1000 - 60}).encode())
    found = locks(Deployment(config, str(path), Limits(), now))
    assert [f.status for f in found] == ["warn"] and "takes it over" in found[0].message


def test_leftovers_of_killed_runs_and_crowded_partitions(baseline, tmp_path, private_temp):
    path, out = deployment(baseline, tmp_path)
    partition = next((out / "raw").glob("date=*"))
    data_file = next(partition.glob("part-*.parquet"))
    (partition / f".{data_file.name}.{_dead_pid()}@{socket.gethostname()}.0badc0de.tmp").write_bytes(
        b"x" * 10
    )
    spool = Path(private_temp) / "etl-lake-killed.arrow"
    spool.write_bytes(b"x" * 10)
    old = time.time() - 2 * 3600
    os.utime(spool, (old, old))
    for shard in ("s0of2", "s1of2"):
        for bucket in range(2):
            shutil.copy(data_file, partition / f"part-127.0.0.1-{shard}-b{bucket}of4.parquet")
    found = checks(path, server=False)
    assert (
        statuses(found)["leftovers.temp"] == {"warn"}
        and "1 temp file" in found["leftovers.temp"][0]["message"]
    )
    assert (
        statuses(found)["leftovers.spool"] == {"warn"}
        and "etl-lake-*.arrow" in found["leftovers.spool"][0]["fix"]
    )
    assert statuses(found)["files"] == {"warn"} and found["files"][0]["fix"].startswith("etl compact")
    assert diagnose(load_config(path), str(path), server=False).healthy()  # warnings: no person needed
    assert not diagnose(load_config(path), str(path), server=False).healthy(strict=True)


def test_one_instance_under_two_source_names(emulator, baseline, tmp_path, capsys):
    path, out = deployment(baseline, tmp_path)
    # The same server under another host name and a name given on purpose: nothing the run can tell apart
    # from another platform (etl/pipeline/identity.py), which the objects table shows.
    other = config_dict(
        emulator.base_url.replace("127.0.0.1", "localhost"),
        out,
        series=["average"],
        source={"name": "same-instance"},
    )
    other_path = write_config(tmp_path / "other.yaml", other)
    assert etl(capsys, "-q", "run", "-c", str(other_path), "--no-progress")[0] == 0
    found = checks(path, server=False)
    assert statuses(found)["sources"] == {"fail"}
    assert "same-instance" in found["sources"][0]["message"] and "127.0.0.1" in found["sources"][0]["fix"]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_lake_tables_that_need_maintenance(emulator, tmp_path, capsys, fmt):
    data = config_dict(
        emulator.base_url,
        tmp_path / "out",
        series=["raw"],
        window={"end": "2026-11-02T00:00:00Z"},
        sink={"format": fmt, "buckets": 1},
        dimensions=False,
    )
    path = write_config(tmp_path / "c.yaml", data)
    for again in ([], ["--full-refresh"]):  # the second run replaces the first one's rows: old versions
        assert etl(capsys, "-q", "run", "-c", str(path), "--no-progress", *again)[0] == 0
    assert statuses(checks(path, server=False))["lake"] == {"ok"}
    tight = Limits(files_per_partition=0, metadata_bytes=1, retain_ms=0)
    found = statuses(checks(path, tight, server=False, now=now_ms() + 1000))
    assert found["lake.files"] == found["lake.metadata"] == found["lake.versions"] == {"warn"}


def test_after_a_sigkill_a_run_was_killed_and_its_spools_are_not_called_old(tmp_path, private_temp):
    """Issue 43: a killed run leaves no record; its lock says which run it was. A dead run's spool folder is
    a killed run's whatever its age."""
    with run_emulator(emulator_config()) as slow:
        slow.set_faults(latency=0.2)
        path = write_config(tmp_path / "c.yaml", config_dict(slow.base_url, tmp_path / "out"))
        lock = tmp_path / "out" / "_state" / "127.0.0.1" / "lock"
        run = subprocess.Popen(
            [sys.executable, "-m", "etl", "run", "-c", str(path), "--no-progress"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not (lock.exists() and f'"pid": {run.pid}' in lock.read_text()):  # the run holds its lock
                assert run.poll() is None
                time.sleep(0.01)
        finally:
            run.kill()
            run.wait()
    spool = Path(private_temp) / "etl-spools" / "4242-0badc0de"
    spool.mkdir(parents=True)
    (spool / "lock").write_bytes(b"")  # nobody holds it: its process is gone
    found = checks(path, server=False)
    message = found["runs.last"][0]["message"]
    assert statuses(found)["runs.last"] == {"warn"} and "was killed before it finished" in message, message
    assert f"pid {run.pid}" in message and "no run recorded" not in message
    spools = found["leftovers.spool"][0]
    assert spools["status"] == "warn" and "1 spool folder(s) of killed runs" in spools["message"]
    assert "older than" not in spools["message"] and str(spool) in spools["fix"]

    # A state reset holds the same lock: it is not taken for a killed run.
    assert etl_cli("state", "reset", "-c", str(path), "--yes").returncode == 0
    assert "no run recorded" in checks(path, server=False)["runs.last"][0]["message"]
