"""Whether the interpreter was started as the `etl` command, from its own arguments: what that changes,
tests/e2e/test_own_process.py."""

from __future__ import annotations

import sys

import pytest

from etl.support.startup import started_as_etl

SCRIPT = "/venv/bin/etl"


@pytest.mark.parametrize(
    ("orig_argv", "argv0", "started"),
    [
        (["python", "-m", "etl", "run"], "/src/etl/__main__.py", True),
        (["python", "-X", "importtime", "-u", "-m", "etl"], "/src/etl/__main__.py", True),
        (["python", "-W", "ignore", "-uBmetl"], "/src/etl/__main__.py", True),
        (["python", "--check-hash-based-pycs", "never", "-Im", "etl"], "/src/etl/__main__.py", True),
        (["/venv/bin/python", SCRIPT, "run"], SCRIPT, True),  # the console script
        (["python", "-m", "cProfile", "-o", "p", "-m", "etl"], "/src/etl/__main__.py", False),
        (["python", "-m", "cProfile", SCRIPT, "run"], SCRIPT, False),
        (["python", "-c", "import etl.cli; etl.cli.console_main()"], "-c", False),
        (["python", "-m", "etl_emulator"], "/src/etl_emulator/__main__.py", False),
        (["python", "-m", "pytest", "-m", "etl"], "/venv/bin/pytest", False),
        (["python", "program.py", "-m", "etl"], SCRIPT, False),
        (["python", "-"], "-", False),
    ],
)
def test_started_as_etl(monkeypatch, orig_argv, argv0, started):
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", [argv0])
    assert started_as_etl() is started
