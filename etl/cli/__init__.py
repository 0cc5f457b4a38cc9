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

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """The `etl` command: `argv` None reads the process's own arguments and may end the process."""
    restore = _nothing
    try:  # from the first statement: a Ctrl-C anywhere after it is one line
        restore = interrupts.install()
        if argv is None:
            startup.begin()
        from etl.cli.app import run

        run(argv)
    except Exception as exc:  # a Ctrl-C inside a class being made (while a module loads) comes wrapped
        if not interrupted(exc):
            raise
        _leave_interrupted(argv)
    except KeyboardInterrupt:  # before the command could handle it (loading), or while it reported
        _leave_interrupted(argv)
    finally:
        restore()


def _nothing() -> None:
    pass


def _leave_interrupted(argv: list[str] | None) -> None:
    say_interrupted(argv)
    if argv is None:  # the process's own command: no interpreter shutdown to interrupt again
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
