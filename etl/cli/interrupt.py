"""A Ctrl-C that came before a command could report it: how to recognise one, and its one line.

Only the standard library: the command's entry point (etl/cli/__init__.py) loads this before anything
else, and the `etl` group (app.py) uses it too.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # etl.errors.ExitCode.INTERRUPTED, without importing anything yet


def interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt caused `exc`: Python 3.11 wraps one raised in a class's __set_name__
    (functools.cached_property's, say, while `platform` loads) in a RuntimeError."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def say_interrupted(argv: list[str] | None) -> None:
    """The line of a Ctrl-C that came before a command could report it; and for `etl run --json`, the
    summary stdout always gets."""
    sys.stderr.write("etl: interrupted\n")
    args = sys.argv[1:] if argv is None else argv
    if next((a for a in args if not a.startswith("-")), None) == "run" and "--json" in args:
        sys.stdout.write(f'{{"status": "interrupted", "error": "interrupted", "exit_code": {INTERRUPTED}}}\n')
    sys.stdout.flush()
