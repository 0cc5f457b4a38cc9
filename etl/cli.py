"""Command line: parse, call the library, print. No pipeline logic lives here."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import click
import orjson

from etl import redact
from etl.config import Config, load_config
from etl.emulator.cli import emulator
from etl.errors import ConfigError, EtlError, ExitCode, Interrupted
from etl.timeutil import to_ms

log = logging.getLogger("etl")
_debug = False


def _setup_logging(debug: bool, quiet: bool) -> None:
    redact.install_log_redaction()
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not debug:
        for noisy in ("httpx", "httpcore", "asyncio", "botocore", "aiobotocore", "s3fs", "distributed"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Verbose logs and full tracebacks.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
@click.version_option(package_name="etl")
def cli(debug: bool, quiet: bool) -> None:
    """Export time series from the monitoring platform into partitioned Parquet/CSV datasets.

    \b
    Start here:
      etl emulator serve            a local platform to try everything against
      etl plan -c configs/demo.yaml what a run would fetch
      etl run  -c configs/demo.yaml fetch, write, checkpoint
    Exit codes: 0 ok, 1 aborted, 2 config/usage, 3 auth, 4 network, 5 server, 6 data,
    7 output, 8 locked, 70 internal, 130 interrupted.
    """
    global _debug
    _debug = debug
    _setup_logging(debug, quiet)


cli.add_command(emulator)


def _time(_ctx: Any, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return to_ms(value)
    except (ValueError, TypeError) as exc:
        raise click.BadParameter(f"{value!r}: {exc}; use e.g. 2026-11-01T00:00:00Z") from None


def _shard(_ctx: Any, _param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter("use I/N, e.g. 0/4") from None
    if not 0 <= index < count:
        raise click.BadParameter("I must be in 0..N-1")
    return index, count


config_option = click.option(
    "-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False), help="YAML run configuration."
)


def _summary_text(summary: dict) -> str:
    lines = [
        f"run {summary['run_id']}: {summary['status']} in {summary['seconds']:.1f}s",
        f"  window      {summary['window']['start']} .. {summary['window']['end']}" if summary["window"] else "",
        f"  objects     {summary['objects']}    parameters {summary['parameters']}"
        + (f"    shard {summary['shard']}" if summary.get("shard") else ""),
        f"  executor    {summary['executor']}" if summary.get("executor", "local") != "local" else "",
    ]
    for name, s in summary["series"].items():
        lines.append(f"  {name:<11} {s['windows']:>6} windows {s['points']:>12,} points {s['files']:>5} files")
    if not summary["series"] and summary["status"] == "ok":
        lines.append("  series      nothing new: the checkpoints already cover this window")
    lines.append(
        f"  requests    {summary['requests']}    retries {summary['retries']}    re-sign-ins {summary['relogins']}"
        f"    splits {summary['splits']}    continuations {summary['continuations']}"
    )
    if summary["warnings"]:
        lines.append("  warnings    " + ", ".join(f"{k}={v}" for k, v in summary["warnings"].items()))
    if summary["failed_window_count"]:
        lines.append(f"  failed      {summary['failed_window_count']} windows (see the run summary JSON)")
    lines.append(f"  output      {summary['output']}")
    return "\n".join(line for line in lines if line)


def _event_loop():
    """uvloop where it exists: a run spends its event loop's time in socket reads, which it does in C."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


@cli.command()
@config_option
@click.option("--from", "start", callback=_time, help="Backfill from this time (ISO 8601 with offset).")
@click.option("--to", "end", callback=_time, help="Backfill up to this time (exclusive).")
@click.option("--full-refresh", is_flag=True, help="Re-fetch the whole window, replacing what is stored.")
@click.option("--shard", callback=_shard,
              help="Take only shard I of N of the parameters (I/N); each shard keeps its own checkpoints and lock.")
@click.option("--executor", type=click.Choice(["local", "dask"]), help="Where slabs run (default: the config's).")
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://127.0.0.1:8786 (implies dask).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
def run(config_path: str, start, end, full_refresh: bool, shard, executor, scheduler, as_json: bool, progress) -> None:
    """Fetch new data, write it, checkpoint it."""
    import pandas  # noqa: F401  pyarrow loads it at its first conversion: load it now, not mid-run

    from etl.allocator import release_freed_memory
    from etl.pipeline import Runner, RunOptions

    release_freed_memory()

    config = load_config(config_path)
    options = RunOptions(start, end, full_refresh, shard, progress, executor=executor, scheduler=scheduler)
    runner = Runner(config, options)
    # SIGTERM stops like Ctrl-C: while windows are fetched, after those in flight; before, by unwinding
    # to exit 130 (a temp file left behind is swept by the next run).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        summary = _event_loop()(runner.run())
    except EtlError:
        if runner.summary.series or runner.summary.failed_windows:  # show what got done; else the error says it all
            click.echo(_summary_text(runner.summary.as_dict()), err=True)
        raise
    body = summary.as_dict()
    click.echo(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() if as_json else _summary_text(body))


@cli.command("plan")
@config_option
@click.option("--from", "start", callback=_time, help="Plan a backfill from this time.")
@click.option("--to", "end", callback=_time, help="Plan a backfill up to this time.")
@click.option("--full-refresh", is_flag=True)
@click.option("--shard", callback=_shard)
def plan_cmd(config_path: str, start, end, full_refresh: bool, shard) -> None:
    """Show the work a run would do (signs in and lists parameters; fetches no series)."""
    from etl.pipeline import Runner, RunOptions

    config = load_config(config_path)
    summary = asyncio.run(Runner(config, RunOptions(start, end, full_refresh, shard, dry_run=True)).run()).as_dict()
    click.echo(f"window      {summary['window']['start']} .. {summary['window']['end']}")
    click.echo(f"objects     {summary['objects']}    parameters {summary['parameters']}")
    total = 0
    for name, p in sorted(summary["planned"].items()):
        total += p["windows"]
        click.echo(f"{name:<11} {p['parameters']:>5} parameters {p['slabs']:>5} slabs {p['windows']:>7} windows")
    click.echo(f"requests    {total} (one per window; full answers are split and add more)")


@cli.command("compact")
@config_option
def compact_cmd(config_path: str) -> None:
    """Merge the files of each partition into one (after sharded runs); holds the state lock."""
    from etl.compact import compact

    summary = compact(load_config(config_path, offline=True))
    click.echo(f"compacted {summary.partitions} partition(s): {summary.files_removed} file(s) merged away, "
               f"{summary.temp_files_removed} temp file(s) removed")


@cli.group()
def state() -> None:
    """Inspect or reset the checkpoints of a config."""


def _store(config: Config, shard: tuple[int, int] | None):
    from etl.state import StateStore

    return StateStore.for_config(config, shard)


shard_option = click.option("--shard", callback=_shard, help="The checkpoints of shard I/N (runs with --shard I/N).")


@state.command("show")
@config_option
@shard_option
@click.option("--json", "as_json", is_flag=True)
def state_show(config_path: str, shard, as_json: bool) -> None:
    """Covered intervals and high-water mark per (parameter, series)."""
    rows = list(_store(load_config(config_path, offline=True), shard).load().rows())
    if as_json:
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    else:
        _table(rows, ["param_id", "series", "high_water", "intervals", "covered"])


@state.command("reset")
@config_option
@click.option("--param", "params", type=int, multiple=True, help="Only these parameter ids.")
@click.option("--series", "series", type=click.Choice(["raw", "average", "candles"]), multiple=True)
@shard_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def state_reset(config_path: str, params: tuple[int, ...], series: tuple[str, ...], shard, yes: bool) -> None:
    """Forget checkpoints; the next run re-fetches (and replaces, never duplicates) that data."""
    store = _store(load_config(config_path, offline=True), shard)
    if not yes:
        click.confirm("Forget these checkpoints?", abort=True)
    with store.lock():
        current = store.load()
        removed = current.reset(set(params) or None, set(series) or None)
        store.save(current)
    click.echo(f"removed {removed} checkpoint(s)")


# -- analysts ----------------------------------------------------------------------------------


@cli.command()
@config_option
@click.argument("sql", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result to .csv or .parquet.")
def query(config_path: str, sql: str | None, output: str | None) -> None:
    """Run SQL (DuckDB) over the output. Views: raw, average, candles, their *_named variants with
    object and parameter names, and the dimension tables. Without SQL, list the views."""
    from etl.query import connect, views

    con = connect(load_config(config_path, offline=True))
    if not sql:
        click.echo("\n".join(views(con)))
        return
    import duckdb

    try:
        relation = con.sql(sql)
    except duckdb.Error as exc:
        raise ConfigError(f"query failed: {str(exc).splitlines()[0]}") from None
    if relation is None:
        return
    if output:
        fmt = "parquet" if output.endswith(".parquet") else "csv"
        relation.write_parquet(output) if fmt == "parquet" else relation.write_csv(output)
        click.echo(f"wrote {output}")
    else:
        frame = relation.df()
        click.echo(frame.to_string(index=False, max_rows=200))


@cli.command()
@click.argument("param_id", type=int)
@click.option("--from", "start", callback=_time, required=True)
@click.option("--to", "end", callback=_time, required=True)
@click.option("--kind", type=click.Choice(["raw", "average", "candles"]), default="raw")
@click.option("--list", "param_list", type=click.Choice(["physical", "calculated", "signal"]), default="physical",
              help="Which list the parameter comes from.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="FILE.csv or FILE.parquet")
def pull(param_id: int, start: int, end: int, kind: str, param_list: str, output: str) -> None:
    """One-off export of one parameter (connection from ETL_BASE_URL, ETL_USERNAME, ETL_PASSWORD)."""
    from pathlib import Path

    from etl.client.models import Parameter
    from etl.pull import pull as pull_series
    from etl.pull import save

    if not output.endswith((".csv", ".parquet")):
        raise ConfigError(f"output {output}: name it .csv or .parquet")
    if start >= end:
        raise ConfigError("--from must be before --to")
    meta = {"type": "signal"} if param_list == "signal" else {}
    param = Parameter(param_id, "calculated" if param_list == "calculated" else "physical", 0, meta)

    async def go():
        from etl.client import MonitoringClient

        async with MonitoringClient(*_env_connection()) as client:
            return await pull_series(client, param, kind, start, end)

    table, counters = asyncio.run(go())
    save(table, Path(output))
    click.echo(f"wrote {table.num_rows:,} {kind} points of parameter {param_id} to {output}"
               f" ({counters['requests']} requests)")


@cli.command()
@config_option
@click.argument("param_id", type=int)
@click.option("--from", "start", callback=_time, required=True)
@click.option("--to", "end", callback=_time, required=True)
@click.option("--kind", type=click.Choice(["raw", "average", "candles"]), default="raw")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="FILE.png")
def plot(config_path: str, param_id: int, start: int, end: int, kind: str, output: str) -> None:
    """Plot one parameter's series from the output."""
    from pathlib import Path

    from etl.plot import plot as draw

    points = draw(load_config(config_path, offline=True), param_id, kind, start, end, Path(output))
    click.echo(f"plotted {points:,} points to {output}")


# -- explorer -----------------------------------------------------------------------------------


def _table(rows: list[dict], columns: Iterable[str] | None = None) -> None:
    if not rows:
        click.echo("(nothing)")
        return
    columns = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [min(48, max(len(c), *(len(row[i]) for row in cells))) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(v[:w].ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def _env_connection() -> tuple[str, str, str]:
    """Base URL, login and password from ETL_BASE_URL, ETL_USERNAME, ETL_PASSWORD."""
    names = ("ETL_BASE_URL", "ETL_USERNAME", "ETL_PASSWORD")
    missing = [v for v in names if not os.environ.get(v)]
    if missing:
        raise ConfigError(f"no connection: pass --config FILE or set {', '.join(missing)}")
    return os.environ[names[0]], os.environ[names[1]], os.environ[names[2]]


def _client_from(config_path: str | None):
    from etl.client import SyncMonitoringClient
    from etl.pipeline import make_client

    if config_path:
        return SyncMonitoringClient(client=make_client(load_config(config_path)))
    return SyncMonitoringClient(*_env_connection())


def _explore(fetch: Callable[[Any], Any], columns: list[str] | None = None) -> Callable:
    """Wrap an explorer command: connect, fetch, print a table or JSON."""

    @click.pass_context
    def command(ctx: click.Context, **kwargs: Any) -> None:
        as_json = kwargs.pop("as_json")
        with _client_from(kwargs.pop("config_path")) as client:
            result = fetch(client, **kwargs)
        rows = [_plain(r) for r in (result if isinstance(result, list) else [result])]
        if as_json:
            click.echo(orjson.dumps(result if not isinstance(result, list) else rows, default=_plain,
                                    option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())
        elif isinstance(result, list):
            _table(rows, columns)
        else:  # one record reads better as field/value lines than as one very wide row
            _table([{"field": k, "value": v} for k, v in rows[0].items()])

    return command


def _plain(value: Any) -> Any:
    return value.raw() if hasattr(value, "raw") else value


def _series_rows(client, param_id: int, start: int, end: int, kind: str, param_list: str) -> list[dict]:
    from etl.client.models import Candles
    from etl.model import ParamKind, Series
    from etl.timeutil import iso

    data = client.series(param_id, ParamKind(param_list), Series(kind), start, end)
    if isinstance(data, Candles):
        return [
            {"ts": iso(int(t)), "open": o, "high": h, "low": lo, "close": c}
            for t, o, h, lo, c in zip(data.ts, data.open, data.high, data.low, data.close, strict=True)
        ]
    return [{"ts": iso(int(t)), "value": float(v)} for t, v in zip(data.ts, data.value, strict=True)]


def _confirm(action: str, yes: bool) -> None:
    if not yes:
        click.confirm(f"This acts on real equipment: {action}. Go ahead?", abort=True)


@cli.group()
def api() -> None:
    """Explore the platform: one command per kind of record (connection: --config or ETL_* env)."""


def _api_command(name: str, fetch: Callable, *params: Callable, columns: list[str] | None = None, help: str = ""):
    command = _explore(fetch, columns)
    for decorate in reversed(params):
        command = decorate(command)
    command = click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")(command)
    command = click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False))(command)
    api.command(name, help=help)(command)


_id = click.argument
_api_command("objects", lambda c: c.objects(), columns=["id", "shortname", "fullname", "timezone", "address"],
             help="Objects visible to the login.")
_api_command("object", lambda c, object_id: c.object(object_id), _id("object_id", type=int), help="One object.")
_api_command("units", lambda c, object_id: c.units(object_id), _id("object_id", type=int),
             help="Devices of an object.")
_api_command("params", lambda c, object_id: c.physical_params(object_id) + c.calculated_params(object_id),
             _id("object_id", type=int), help="Physical and calculated parameters of an object.")
_api_command(
    "series", _series_rows, _id("param_id", type=int),
    click.option("--from", "start", callback=_time, required=True),
    click.option("--to", "end", callback=_time, required=True),
    click.option("--kind", type=click.Choice(["raw", "average", "candles"]), default="raw"),
    click.option("--list", "param_list", type=click.Choice(["physical", "calculated", "signal"]),
                 default="physical", help="Which list the parameter comes from."),
    help="A series of one parameter (raw windows at most 24 h; use 'etl run' for more).",
)
_api_command("status", lambda c, param_id: c.param_status(param_id), _id("param_id", type=int),
             help="Current status of a parameter.")
_api_command(
    "refs",
    lambda c, which: {"zones": c.zones, "classifiers": c.classifiers, "room-types": c.room_types,
                      "rooms": c.rooms}[which](),
    _id("which", type=click.Choice(["zones", "classifiers", "room-types", "rooms"])),
    help="Reference lookups.",
)
_api_command("commands", lambda c, device_id: c.ext_commands(device_id), _id("device_id", type=int),
             columns=["id", "name", "description", "cmd", "data"], help="External commands of a device.")


def _set_value(c, param_id: int, value: float, yes: bool):
    _confirm(f"set parameter {param_id} to {value}", yes)
    return c.set_value(param_id, value) or {"ok": True}


def _run_command(c, device_id: int, command_id: int, data: str, yes: bool):
    _confirm(f"run command {command_id} on device {device_id} with data {data!r}", yes)
    return c.run_command(device_id, command_id, data) or {"ok": True}


_yes = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
_api_command("set-value", _set_value, _id("param_id", type=int), _id("value", type=float), _yes,
             help="Set a physical parameter's value (acts on equipment).")
_api_command("run-command", _run_command, _id("device_id", type=int), _id("command_id", type=int),
             _id("data"), _yes, help="Run an external command on a device (acts on equipment).")


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click turns Ctrl-C/SIGTERM into Abort
            click.echo("etl: interrupted", err=True)
            sys.exit(Interrupted.exit_code)
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except EtlError as exc:
        if _debug:
            traceback.print_exc()
        click.echo(f"etl: error: {redact.redact(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("etl: interrupted", err=True)
        sys.exit(Interrupted.exit_code)
    except Exception as exc:  # a bug: say so in one line; the traceback is one flag away
        if _debug:
            traceback.print_exc()
        click.echo(
            f"etl: internal error: {type(exc).__name__}: {redact.redact(str(exc))} (run with --debug for details)",
            err=True,
        )
        sys.exit(ExitCode.INTERNAL)
    sys.exit(0)
