"""The smaller points of a new user's first hour (issues 43 and 54) that are not one bad input's error line:
what `etl --help` says and how wide it is, a long pull's progress, the failed windows' record named, a
summary that prints no figure it lacks."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time

import pytest

from etl.cli.app import COMMANDS
from etl.pipeline.summary import RunSummary
from tests.support.cli import ETL_COMMAND, connection_env, environment, etl
from tests.support.configs import config_dict, make_config, write_config
from tests.support.pipeline import run


def test_help_starts_with_etl_init_and_names_every_format():
    result = etl("--help")
    assert result.returncode == 0
    start = result.stdout.split("Start here", 1)[1]
    assert start.splitlines()[1].split()[:2] == ["etl", "init"]
    assert all(fmt in result.stdout for fmt in ("Parquet", "CSV", "Delta", "Iceberg"))


@pytest.mark.parametrize("columns", [80, 200])
def test_options_and_text_of_every_help_wrap_at_one_width(columns):
    """Click wraps options and prose at the terminal's width (at most 100); no paragraph is laid out
    by hand wider than that."""
    width = min(columns, 100)
    for command in [[], *([name] for name in COMMANDS)]:
        result = etl(*command, "--help", env={"COLUMNS": str(columns)})
        assert result.returncode == 0, result.stderr
        wide = [line for line in result.stdout.splitlines() if len(line) > width]
        assert not wide, (command, wide)


def test_a_long_pull_shows_its_progress_on_a_terminal(emulator, tmp_path):
    """80 days of raw windows: a bar on the terminal (stderr) while they are fetched."""
    leader, follower = pty.openpty()
    env = environment(env={**connection_env(emulator.base_url), "COLUMNS": "100"})
    proc = subprocess.Popen(
        [*ETL_COMMAND, "pull", "1001", "--from", "2026-08-20T00:00:00Z", "--to", "2026-11-08T00:00:00Z"]
        + ["-o", str(tmp_path / "p.parquet")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    stdout, _ = proc.communicate(timeout=120)
    os.close(leader)
    assert proc.returncode == 0 and b"wrote" in stdout
    assert b"windows" in shown and b"/80" in shown, shown[-400:]


def test_the_summary_names_the_record_that_lists_the_failed_windows():
    summary = RunSummary(run_id="20261101T000000Z-abcdef", output="/data/out")
    summary.failed_windows = [f"param {n} raw ..." for n in range(34)]
    failed = next(line for line in summary.text().splitlines() if line.strip().startswith("failed"))
    assert failed.split(None, 1)[1] == "34 windows (listed in /data/out/_runs/20261101T000000Z-abcdef.json)"


# -- issue 54: what a newcomer tripped on --------------------------------------------------------------


def test_a_run_with_nothing_new_says_so_and_names_no_figure_it_lacks(emulator, tmp_path):
    """No window to fetch, so no round of answers gave the limit a latency baseline: the summary leaves the
    figure out rather than print "None"."""
    config = config_dict(emulator.base_url, tmp_path / "out")
    path = write_config(
        tmp_path / "c.yaml", {**config, "source": {**config["source"], "password": "${ETL_PASSWORD}"}}
    )
    run(make_config(emulator.base_url, tmp_path / "out"))
    result = etl("run", "-c", str(path), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "nothing new: the checkpoints already cover this window" in result.stdout
    capacity = next(line for line in result.stdout.splitlines() if line.strip().startswith("capacity"))
    assert "None" not in result.stdout and "latency" in capacity, result.stdout


def test_a_run_stopped_while_it_lists_the_fleet_names_no_figure_it_lacks(fresh_emulator, tmp_path):
    """SIGINT while discovery waits on the server: the summary the error carries, as text and as a
    notebook's table, says what the run has and nothing it has not."""
    fresh_emulator.set_faults(latency=0.5)  # each answer: the run is still listing when it is stopped
    path = write_config(tmp_path / "c.yaml", config_dict(fresh_emulator.base_url, tmp_path / "out"))
    script = tmp_path / "stopped.py"
    script.write_text(
        "import sys, etl\n"
        "try:\n"
        "    etl.run(sys.argv[1], progress=False)\n"
        "except etl.Interrupted as exc:\n"
        "    print(exc.summary.text())\n"
        "    print(exc.summary._repr_html_())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not any("/auth/" not in r["path"] for r in fresh_emulator.requests()):  # signed in, listing
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert stdout.startswith("run ") and ": interrupted in" in stdout.splitlines()[0], (stdout, stderr)
    assert "parameters 0" in stdout  # stopped before the fleet was listed
    assert "None" not in stdout, stdout
