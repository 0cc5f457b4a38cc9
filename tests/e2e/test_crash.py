"""`etl run` killed at random moments, interrupted, or started twice: the data stays exact and readable."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from etl.config import parse_config
from etl.storage.atomic import TMP_SUFFIX
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact, assert_output_matches_state
from tests.support.cli import environment, etl, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.emulator import emulator_config
from tests.support.expected import SOURCE
from tests.support.kills import commits, kill_when, lake_data_files, reading, spools_of, temp_files
from tests.support.output import checkpoints, read_quality
from tests.support.pipeline import run


@pytest.fixture
def slow_emulator() -> Iterator[RunningEmulator]:
    """30 ms per answer: a run lasts a few seconds, long enough to be killed part-way."""
    with run_emulator(emulator_config()) as running:
        running.set_faults(latency=0.03)
        yield running


def config_file(emulator: RunningEmulator, tmp_path: Path, **sections) -> Path:
    data = config_dict(
        emulator.base_url,
        tmp_path / "out",
        window={"overlap": "0s"},
        extract={"concurrency": 2, "slabs_in_flight": 1},
        **sections,
    )
    data["source"]["password"] = "${ETL_PASSWORD}"
    return write_config(tmp_path / "c.yaml", data)


def start(path: Path, *options: str) -> subprocess.Popen:
    return etl_process("run", "-c", str(path), "--no-progress", *options)


FORMATS = ["parquet", "delta", "iceberg"]


def moments(emulator: RunningEmulator, out: Path, rnd: random.Random, fmt: str = "parquet") -> dict:
    """Ways to pick the moment of a kill: while fetching (after a random number of answers), while a
    data file is being written (its temp file exists; for lake tables: right after a table commit,
    before the state log holds it), while the checkpoint is being written."""
    state_dir = out / "_state" / SOURCE

    def fetching():
        n = rnd.randint(1, 30)
        return lambda: sum("interval_ms" in r for r in emulator.requests()) >= n

    def writing():
        if fmt != "parquet":
            before = commits(out)
            return lambda: bool(commits(out) - before)
        return lambda: any(
            p.name.endswith(TMP_SUFFIX)
            for d in ("raw", "average", "candles", "quality", "dimensions")
            for p in (out / d).rglob(".*")
        )

    def checkpointing():
        return lambda: any(p.name.endswith(TMP_SUFFIX) for p in state_dir.rglob(".*"))

    def committing():
        """Lake tables: once a commit's first data file exists (the commit may not be made yet)."""
        before = lake_data_files(out)
        return lambda: bool(lake_data_files(out) - before)

    return {
        "fetching": fetching,
        "writing": writing,
        "checkpointing": checkpointing,
        "committing": committing,
    }


def kill_and_recover(
    emulator: RunningEmulator,
    tmp_path: Path,
    phases: list[str],
    seed: int,
    fmt: str = "parquet",
    kills: int | None = None,
) -> list[str]:
    """Kill a run at each phase in turn, starting the next run each time, then let one finish. Lake
    tables keep 3 versions: every few commits expire older ones, and recovery must not care. With
    `kills`, phases are taken in turn until that many kills hit, a run that finished first is followed
    by a --full-refresh one (so there is always work to be killed in)."""
    sink = {"format": fmt} if fmt == "parquet" else {"format": fmt, "versions": 3}
    path = config_file(emulator, tmp_path, sink=sink)
    out = tmp_path / "out"
    rnd = random.Random(seed)
    pick = moments(emulator, out, rnd, fmt)
    hit = []
    killed: list[int] = []
    spooled = 0  # killed runs that left spools (the next run removes them)
    refresh = False
    order = phases if kills is None else [phases[i % len(phases)] for i in range(4 * kills)]
    with reading(out, fmt) as reader:
        for phase in order:
            if kills is not None and len(hit) >= kills:
                break
            emulator.clear_requests()
            proc = start(path, *(["--full-refresh"] if refresh else []))
            if kill_when(proc, pick[phase]()):
                hit.append(phase)
                killed.append(proc.pid)
                spooled += bool(spools_of([proc.pid]))
                refresh = False
            else:
                stderr = proc.stderr.read()
                assert proc.returncode == 0, stderr  # finished before the moment came: also fine
                assert "another run holds the state lock" not in stderr
                refresh = kills is not None
        final = etl("run", "-c", str(path), "--json")
        assert final.returncode == 0, final.stderr  # a killed run's lock never blocks the next one
    assert reader.reads > 0
    assert_exact(out)
    assert temp_files(out) == []
    assert spools_of(killed) == []  # the killed runs' spools were removed by the next run
    assert_quality_of_a_clean_run(emulator, path, out, tmp_path / "clean")
    if fmt != "parquet" and len(hit) >= 5:
        assert spooled, "no killed run had spooled anything: the check above proves nothing"
    return hit


def assert_quality_of_a_clean_run(emulator: RunningEmulator, path: Path, out: Path, clean: Path) -> None:
    """Exactly one quality row per (parameter, day), each equal to what one uninterrupted run writes."""
    got = read_quality(out)
    keys = list(zip(got.column("param_id").to_pylist(), got.column("day").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == 8 * 2
    emulator.set_faults(reset=True)
    data = yaml.safe_load(path.read_text())
    data["sink"]["path"], data["series"] = (
        str(clean),
        ["raw"],
    )  # quality is computed from the raw series alone
    data["source"]["password"] = "demo"
    run(parse_config(data))
    assert got.equals(read_quality(clean))


@pytest.mark.parametrize("fmt", FORMATS)
def test_sigkill_at_random_moments_then_rerun_gives_exactly_the_source(slow_emulator, tmp_path, fmt):
    hit = kill_and_recover(slow_emulator, tmp_path, ["fetching", "writing", "checkpointing"], seed=1, fmt=fmt)
    assert "fetching" in hit  # the others depend on catching a temp file that lives milliseconds
    if fmt != "parquet":
        assert "writing" in hit  # killed right after a table commit: its checkpoint came back from the table


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_ten_sigkills_at_random_moments_then_rerun_gives_exactly_the_source(slow_emulator, tmp_path, fmt):
    rnd = random.Random(20)
    phases = [
        rnd.choice(["fetching", "committing", "writing", "writing", "checkpointing"]) for _ in range(10)
    ]
    hit = kill_and_recover(slow_emulator, tmp_path, phases, seed=20, fmt=fmt, kills=10)
    assert len(hit) == 10 and {"writing", "committing"} <= set(hit), hit


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_soak_many_kills_under_faults(slow_emulator, tmp_path, seed):
    slow_emulator.set_faults(error_rate=0.1, drop_rate=0.05, truncate_rate=0.05, session_max_requests=20)
    rnd = random.Random(seed)
    phases = [rnd.choice(["fetching", "fetching", "writing", "checkpointing"]) for _ in range(10)]
    kill_and_recover(slow_emulator, tmp_path, phases, seed)


# -- SIGINT / SIGTERM -------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_after_the_slab_in_flight_and_the_next_run_resumes(slow_emulator, tmp_path, signum):
    path = config_file(slow_emulator, tmp_path)
    out = tmp_path / "out"
    proc = start(path)
    kill_when_ready = time.monotonic() + 60
    while not list((out / "_state" / SOURCE / "log").glob("*.json")):  # a slab is written and checkpointed
        assert proc.poll() is None and time.monotonic() < kill_when_ready, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert f"{signum.name} received: stopping after the windows in flight" in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("etl: ")]
    assert (
        len(errors) == 1 and errors[0].startswith("etl: interrupted") and "run again to resume" in errors[0]
    ), stderr
    assert "Traceback" not in stderr
    state = checkpoints(out)
    assert len(state) and temp_files(out) == []
    assert_output_matches_state(out, state)
    summaries = [json.loads(p.read_bytes()) for p in (out / "_runs").glob("*.json")]
    assert [s["status"] for s in summaries] == ["interrupted"]
    # It stopped after the slab in flight, not at the run's end: its own record says so.
    done, planned = (sum(s["slabs"] for s in summaries[0][k].values()) for k in ("series", "planned"))
    assert 0 < done < planned, summaries[0]

    slow_emulator.clear_requests()
    result = etl("run", "-c", str(path))
    assert result.returncode == 0, result.stderr
    assert_exact(out)


def test_a_signal_commits_the_lake_groups_in_flight_then_stops(slow_emulator, tmp_path):
    """Lake slabs wait for their group's commit (etl/sinks/lake/committer.py): a stop commits the groups
    of the slabs done, with their checkpoints, before the run ends."""
    path = config_file(slow_emulator, tmp_path, sink={"format": "delta"})
    out = tmp_path / "out"
    proc = start(path)
    deadline = time.monotonic() + 60
    while sum("interval_ms" in r for r in slow_emulator.requests()) < 12:  # a few slabs done
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    state = checkpoints(out)
    assert len(state)  # committed by the stop, not by the (60 s) interval
    assert_output_matches_state(out, state)
    result = etl("run", "-c", str(path))
    assert result.returncode == 0, result.stderr
    assert_exact(out)


def test_sigterm_before_any_window_is_a_clean_stop_too(tmp_path):
    with run_emulator(emulator_config()) as emulator:
        emulator.set_faults(latency=0.5)  # each of the sign-in and the listings takes half a second
        proc = start(config_file(emulator, tmp_path))
        deadline = time.monotonic() + 60
        # Past the sign-in, the run holds its lock and lists the fleet (a run stopped before it took the
        # lock leaves no record: tests/e2e/test_refused_runs.py).
        while not any("/auth/" not in r["path"] for r in emulator.requests()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("etl: interrupted") and "Traceback" not in stderr
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_runs").glob("*.json")]
    assert [s["status"] for s in summaries] == ["interrupted"]  # the run's record never says "ok"


def command_script(folder: Path, code: str) -> list[str]:
    """`python SCRIPT`, a script of `code` that ends in etl.cli.console_main(): the etl command as the console
    script runs it, in a process of its own."""
    script = folder / "etl_command.py"
    script.write_text(code + "\nimport etl.cli\netl.cli.console_main()\n")
    return [sys.executable, str(script)]


# The child says "started" from etl's first statement, once its SIGINT handler is in: before that, the
# interpreter's own start and import machinery answer a SIGINT, as for any Python program.
STARTED = """
import sys
from etl.support import interrupts

installed = interrupts.install

def install():
    restore = installed()
    sys.stderr.write("started\\n")
    sys.stderr.flush()
    return restore

interrupts.install = install
"""


def start_marked(folder: Path, *args: str) -> subprocess.Popen:
    """`etl ARGS`, returned once the child's command has its SIGINT handler in."""
    proc = subprocess.Popen(
        [*command_script(folder, STARTED), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert proc.stderr is not None and proc.stderr.readline() == "started\n"
    return proc


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.35, 0.6])
def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(emulator, tmp_path, delay):
    """From the moment etl's code runs, its imports included, wherever SIGINT lands while it runs."""
    data = config_dict(emulator.base_url, tmp_path / "out")
    data["source"]["password"] = "${ETL_PASSWORD}"
    # One request at a time, each busy 30 ms at the server: the run lasts seconds of the server's time
    # (its hundred-odd requests), whatever the machine; a busy one only makes it longer.
    emulator.set_faults(capacity=1, service_time=0.03)
    try:
        proc = start_marked(tmp_path, "run", "-c", str(write_config(tmp_path / "c.yaml", data)))
        time.sleep(delay)
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        emulator.set_faults(reset=True)
    assert proc.returncode == 130, stderr
    said = [line for line in stderr.splitlines() if line.startswith("etl: ")]
    assert len(said) == 1 and said[0].startswith("etl: interrupted") and "Traceback" not in stderr, stderr


LOST_CTRL_C = """
import os, signal, sys, weakref
import etl.cli, etl.cli.app as app

command = app.run

def run(argv, **options):
    # SIGINT lands in a weakref callback, as in the import machinery's: Python prints the
    # KeyboardInterrupt as "Exception ignored" and goes on.
    class Held: pass
    held = Held()
    def callback(_):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000): pass
    ref = weakref.ref(held, callback)
    del held
    command(argv, **options)

app.run = run
"""


def test_a_ctrl_c_python_loses_while_etl_loads_still_stops_the_run(emulator, tmp_path):
    config = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    done = subprocess.run(
        [*command_script(tmp_path, LOST_CTRL_C), "run", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
    )
    assert "Exception ignored" in done.stderr  # the KeyboardInterrupt itself went nowhere
    assert done.returncode == 130, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("etl: ")] == [
        "etl: interrupted before the run started"
    ]
    assert not (tmp_path / "out" / "raw").exists()


@pytest.mark.parametrize("delay", [0.02, 0.8])
def test_json_says_interrupted_on_stdout(slow_emulator, tmp_path, delay):
    """--json: the summary on stdout whatever the outcome; here a Ctrl-C while loading, and while fetching."""
    proc = start_marked(
        tmp_path, "run", "-c", str(config_file(slow_emulator, tmp_path)), "--no-progress", "--json"
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    summary = json.loads(stdout)
    assert summary["status"] == "interrupted" and summary["exit_code"] == 130, stdout


# -- the state lock ---------------------------------------------------------------------------------


def test_a_second_concurrent_run_is_refused_with_exit_8(slow_emulator, tmp_path):
    path = config_file(slow_emulator, tmp_path)
    slow_emulator.set_faults(latency=0.5)  # the first run must outlast the second one's start
    first = start(path)
    lock = tmp_path / "out" / "_state" / SOURCE / "lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_bytes()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.005)
    second = etl("run", "-c", str(path))
    assert second.returncode == 8, second.stderr
    assert second.stderr.count("\n") == 1 and "etl: error: another run holds the state lock" in second.stderr
    assert f'"pid": {first.pid}' in second.stderr  # names the holder
    slow_emulator.set_faults(latency=0)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr  # the refused run did not disturb the first
    assert_exact(tmp_path / "out")
