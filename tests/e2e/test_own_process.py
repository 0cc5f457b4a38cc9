"""Whose process it is: the `etl` command started as the console script or `python -m etl` ends its process as
soon as it is done (os._exit after the atexit handlers, etl/cli/app.py); a program that runs the command in
turn (a profiler, a script calling etl.cli.main) keeps its own ending. Which start is which:
tests/unit/support/test_started_as_etl.py."""

from __future__ import annotations

import os
import pstats
import subprocess
import sys
from pathlib import Path

import pytest

# Says so on stderr when the interpreter's teardown clears `sys`.
PROBE = """
import os, sys

class _Teardown:
    def __del__(self, write=os.write):
        write(2, b"teardown\\n")

sys._teardown_probe = _Teardown()
"""


def probed(tmp_path: Path, *command: str) -> subprocess.CompletedProcess:
    """`command` with PROBE loaded at start-up (as sitecustomize)."""
    (tmp_path / "sitecustomize.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


@pytest.mark.parametrize(
    "command",
    [[str(Path(sys.executable).with_name("etl"))], [sys.executable, "-m", "etl"]],
    ids=["console script", "python -m etl"],
)
def test_the_command_ends_its_process_without_the_interpreters_teardown(tmp_path, command):
    done = probed(tmp_path, *command, "--version")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert "version 0.1.0" in done.stdout


def test_a_profile_of_the_command_is_written(tmp_path):
    done = probed(tmp_path, sys.executable, "-m", "cProfile", "-o", "etl.prof", "-m", "etl", "--version")
    assert (done.returncode, done.stderr) == (0, "teardown\n"), done.stderr
    profiled = pstats.Stats(str(tmp_path / "etl.prof")).stats  # type: ignore[attr-defined]
    assert any(name == "console_main" for _, _, name in profiled)


def test_a_program_that_calls_main_reaches_its_finally(tmp_path):
    code = "import etl.cli\ntry:\n    etl.cli.main()\nfinally:\n    print('finally')\n"
    done = probed(tmp_path, sys.executable, "-c", code, "no-such-command")
    assert (done.returncode, done.stdout) == (2, "finally\n")
    assert done.stderr.splitlines() == [
        "etl: error: No such command 'no-such-command'. (see '-c -h')",
        "teardown",
    ]
