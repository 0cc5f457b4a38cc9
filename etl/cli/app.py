"""The `etl` group: logging, lazily loaded commands, and the one-line report of every error.

Commands live in modules by audience: `runs` (run, plan, state, compact, vacuum), `ops` (init, doctor,
verify), `analysts` (query, pull, plot, report) and `explorer` (api ...); `params` holds the parameter types, `render` what gets
printed. A command's module is imported when that command runs (an hourly `etl run` does not pay for
the analysts' or the emulator's imports); `etl emulator` is the separate `etl_emulator` package.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import sys
import traceback

import click

from etl.cli.interrupt import interrupted, say_interrupted
from etl.errors import EtlError, ExitCode, Interrupted
from etl.support import interrupts, redact, startup
from etl.support.terminal import printable

__all__ = ["COMMANDS", "cli", "run"]

_debug = False


def _setup_logging(debug: bool, quiet: bool) -> None:
    redact.install_log_redaction()
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    with interrupts.deferred():  # a Ctrl-C inside the handler's making would break the shutdown's logging
        logging.basicConfig(
            level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
    if not debug:
        for noisy in ("httpx", "httpcore", "asyncio", "botocore", "aiobotocore", "s3fs", "distributed"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


# Each command, as "module:attribute", loaded when it is asked for (or listed by --help).
COMMANDS = {
    "run": "etl.cli.runs:run",
    "plan": "etl.cli.runs:plan_cmd",
    "state": "etl.cli.runs:state",
    "compact": "etl.cli.runs:compact_cmd",
    "vacuum": "etl.cli.runs:vacuum_cmd",
    "init": "etl.cli.ops:init_cmd",
    "doctor": "etl.cli.ops:doctor_cmd",
    "verify": "etl.cli.ops:verify_cmd",
    "query": "etl.cli.analysts:query",
    "pull": "etl.cli.analysts:pull",
    "plot": "etl.cli.analysts:plot",
    "report": "etl.cli.analysts:report",
    "api": "etl.cli.explorer:api",
    "emulator": "etl_emulator.cli:emulator",
}


class LazyGroup(click.Group):
    """click's group, with the commands of `COMMANDS` imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        module, _, attribute = COMMANDS[name].partition(":")
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith(("etl.", "etl_emulator")):
                raise click.UsageError(
                    f"'etl {name}' needs {exc.name}, which is not installed: "
                    f"pip install 'etl[{'emulator' if name == 'emulator' else 'dev'}]'"
                ) from None
            raise
        return command if isinstance(command, click.Command) else None


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option("--debug", is_flag=True, help="Verbose logs and full tracebacks.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
@click.version_option(package_name="etl")
def cli(debug: bool, quiet: bool) -> None:
    """Export time series from the monitoring platform into Parquet or CSV datasets, Delta or Iceberg
    tables, with checkpoints: each run fetches only what is new.

    \b
    Start here, with your instance:
      etl init --base-url https://HOST --username NAME -o site.yaml
      etl plan -c site.yaml      what a run would fetch
      etl run -c site.yaml       fetch, write, checkpoint
      etl doctor -c site.yaml    is the deployment healthy
    Without one: etl emulator serve, then etl run -c configs/demo.yaml.

    Times (TIME) are ISO 8601 with a UTC offset, e.g. 2026-11-01T00:00:00Z, or epoch numbers: seconds,
    milliseconds or microseconds told apart by size, or with their unit (1793491200s, 1793491200000ms).

    Exit codes: 0 ok, 1 aborted, 2 config/usage, 3 auth, 4 network, 5 server, 6 data, 7 output, 8 locked,
    9 quality below 'etl report --fail-under', 10 'etl doctor' found something to fix, 11 'etl verify'
    found the output different from the source, 70 internal, 130 interrupted.
    """
    global _debug
    _debug = debug
    startup.loaded()  # click has loaded the command's module by now
    _setup_logging(debug, quiet)


def run(argv: list[str] | None = None, *, leave: bool = False) -> None:
    """`etl` with these arguments (None: the process's own), ending in SystemExit; with `leave` (etl's
    own process only), in the process's end."""
    try:
        _main(argv)
    except SystemExit as exc:
        if leave:
            end_process(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        raise


def end_process(code: int) -> None:
    """End the process once its command is done, without the interpreter's teardown: atexit handlers
    run (spool folders go), buffers are flushed, then os._exit. The teardown frees every module's
    objects one by one; delta-rs's runtime threads sometimes abort it (SIGABRT, "terminate called
    without an active exception": exit 134 for a finished command); and after a Ctrl-C the interpreter
    may still exit by the signal (-2, not 130) when a module being imported saw it first. Everything is
    committed and written by now."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # `etl query | head`: the reader has what it wanted
            pass
        except OSError as exc:  # a full disk under a redirected stdout: not a clean exit
            os.write(2, f"etl: error: cannot write the output: {exc}\n".encode())
            code = code or ExitCode.OUTPUT
    os._exit(code)


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click turns Ctrl-C/SIGTERM into Abort
            say_interrupted(argv)
            sys.exit(Interrupted.exit_code)
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        # One line, as every other error: click's usage block would bury it (the hint says where help is).
        message = exc.format_message()
        if "\n" in message:  # a group called without a command: its help is the answer
            exc.show()
            sys.exit(exc.exit_code)
        hint = f" (see '{exc.ctx.command_path} -h')" if isinstance(exc, click.UsageError) and exc.ctx else ""
        click.echo(f"etl: error: {printable(redact.redact(message))}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except EtlError as exc:
        if _debug:
            traceback.print_exc()
        kind = "" if isinstance(exc, Interrupted) else "error: "
        click.echo(f"etl: {kind}{printable(redact.redact(str(exc)))}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        say_interrupted(argv)
        sys.exit(Interrupted.exit_code)
    except Exception as exc:  # a bug: say so in one line; the traceback is one flag away
        if interrupted(exc):  # a Ctrl-C that came wrapped (etl.cli.interrupt.interrupted)
            say_interrupted(argv)
            sys.exit(Interrupted.exit_code)
        if _debug:
            traceback.print_exc()
        click.echo(
            f"etl: internal error: {type(exc).__name__}: {printable(redact.redact(str(exc)))} "
            "(run with --debug for details)",
            err=True,
        )
        sys.exit(ExitCode.INTERNAL)
    sys.exit(0)
