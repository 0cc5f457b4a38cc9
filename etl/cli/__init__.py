"""Command line: parse, call the library, print. No pipeline logic lives here (etl/cli/app.py is the
group; each command's module is loaded when it runs).

This module imports nothing heavy itself, so that a Ctrl-C at any moment, while the rest loads
included, is one line and exit 130 rather than a traceback from inside an import.
"""

from __future__ import annotations

import os
import sys

from etl.cli.interrupt import INTERRUPTED, interrupted, say_interrupted
from etl.support import interrupts, startup  # signal, threading, gc: nothing heavy

__all__ = ["cli", "console_main", "main"]


def main(argv: list[str] | None = None) -> None:
    """The `etl` command called from a program (`argv` None: sys.argv[1:]). It ends in SystemExit and
    changes nothing process-wide: the program keeps its collector, environment and allocators."""
    _command(argv, own_process=False, leave=False)


def console_main() -> None:
    """The `etl` command in a process of its own: the console script, `python -m etl`. The process is set
    up for the command (etl/support/startup.py), and ended as soon as it is done (app.end_process) when the
    interpreter was started as the command; under a program that runs it in turn (`python -m cProfile -m
    etl`, runpy) it ends as main() does, and that program's work after it is still done."""
    _command(None, own_process=True, leave=startup.started_as_etl())


def _command(argv: list[str] | None, own_process: bool, leave: bool) -> None:
    restore = _nothing
    try:  # from the first statement: a Ctrl-C anywhere after it is one line
        restore = interrupts.install()
        if own_process:
            startup.begin()
        from etl.cli.app import run

        run(argv, leave=leave)
    except Exception as exc:  # a Ctrl-C inside a class being made (while a module loads) comes wrapped
        if not interrupted(exc):
            raise
        _leave_interrupted(argv, leave)
    except KeyboardInterrupt:  # before the command could handle it (loading), or while it reported
        _leave_interrupted(argv, leave)
    finally:
        restore()


def _nothing() -> None:
    pass


def _leave_interrupted(argv: list[str] | None, leave: bool) -> None:
    say_interrupted(argv)
    if leave:  # no interpreter shutdown to interrupt again
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    raise SystemExit(INTERRUPTED) from None


def __getattr__(name: str) -> object:
    """`cli` (the click group) and `COMMANDS`, loaded on first use."""
    if name in ("cli", "COMMANDS"):
        from etl.cli import app

        return getattr(app, name)
    raise AttributeError(f"module 'etl.cli' has no attribute {name!r}")
