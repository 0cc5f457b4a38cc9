"""The smaller points of a new user's first hour (issue 43) that are not one bad input's error line: what
`etl --help` says and how wide it is, a long pull's progress, the failed windows' record named."""

from __future__ import annotations

import os
import pty
import subprocess

import pytest

from etl.cli.app import COMMANDS
from etl.pipeline.summary import RunSummary
from tests.support.cli import ETL_COMMAND, connection_env, environment, etl


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
