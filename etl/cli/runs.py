"""Commands for whoever schedules and operates runs: run, plan, state show|reset|rename-source, compact."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from etl.cli.params import SERIES_CHOICE, SHARD, TIME, config_option, window_options
from etl.cli.render import echo_json, echo_table, plan_text
from etl.config import load_config
from etl.errors import ConfigError, EtlError, Interrupted
from etl.model import Shard
from etl.support import optional, redact, startup

if TYPE_CHECKING:  # the state modules load when a state command runs
    from etl.state import StateStore


@click.command()
@config_option
@window_options(required=False, what="Backfill")
@click.option("--full-refresh", is_flag=True, help="Re-fetch the whole window, replacing what is stored.")
@click.option(
    "--refresh-catalog",
    is_flag=True,
    help="List the parameters of every object, whatever the fleet's catalog says (select.refresh).",
)
@click.option(
    "--shard",
    type=SHARD,
    help="Take only shard I of N of the parameters; each shard keeps its own checkpoints and lock.",
)
@click.option(
    "--executor", type=click.Choice(["local", "dask"]), help="Where slabs run (default: the config's)."
)
@click.option(
    "--scheduler", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://127.0.0.1:8786 (implies dask)."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary as JSON on stdout, whatever the outcome (status, error and exit_code in it).",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write the run's figures there in the Prometheus text format (node-exporter's textfile "
    "collector), atomically, whatever the outcome.",
)
def run(
    config_path: str,
    start: int | None,
    end: int | None,
    full_refresh: bool,
    refresh_catalog: bool,
    shard: Shard | None,
    executor: str | None,
    scheduler: str | None,
    as_json: bool,
    progress: bool | None,
    metrics_file: str | None,
) -> None:
    """Fetch new data, write it, checkpoint it."""
    try:
        config = load_config(config_path)  # first: a mistake in it is told before the pipeline loads
        import etl

        with startup.loading():
            run_pipeline = etl.run  # loads the pipeline
            optional.pyarrow_looks_for_pandas(find=False)  # nothing in a run is a pandas object
        summary = run_pipeline(
            config,
            start=start,
            end=end,
            full_refresh=full_refresh,
            refresh_catalog=refresh_catalog,
            shard=shard,
            executor=executor,  # type: ignore[arg-type]  # click.Choice(["local", "dask"])
            scheduler=scheduler,
            progress=progress,
            metrics_file=metrics_file,
            tune_memory=startup.own_process(),  # a program that calls the CLI keeps its allocators
        )
    except EtlError as exc:
        done: Mapping[str, object] = exc.summary.as_dict() if exc.summary is not None else {}
        if as_json:  # a scheduler reads stdout whatever happened: the summary, status and error included
            status = done.get("status") or ("interrupted" if isinstance(exc, Interrupted) else "failed")
            echo_json(
                {
                    **done,
                    "status": status,
                    "error": done.get("error") or redact.redact(str(exc)),
                    "exit_code": exc.exit_code,
                }
            )
        elif exc.summary is not None and (
            done.get("series") or done.get("failed_window_count") or done.get("windows_not_done")
        ):
            click.echo(exc.summary.text(), err=True)  # what got done; else the error says it
        raise
    if as_json:
        echo_json({**summary.as_dict(), "exit_code": 0})
    else:
        click.echo(summary.text())


@click.command("plan")
@config_option
@window_options(required=False, what="Plan a backfill")
@click.option("--full-refresh", is_flag=True, help="Plan to re-fetch the whole window.")
@click.option(
    "--refresh-catalog", is_flag=True, help="List the parameters of every object, as a run with it would."
)
@click.option("--shard", type=SHARD, help="Plan only shard I of N of the parameters.")
def plan_cmd(
    config_path: str,
    start: int | None,
    end: int | None,
    full_refresh: bool,
    refresh_catalog: bool,
    shard: Shard | None,
) -> None:
    """Show the work a run would do (signs in and lists the parameters due; fetches no series)."""
    config = load_config(config_path)  # first: a mistake in it is told before the pipeline loads
    import etl

    summary = etl.run(
        config,
        start=start,
        end=end,
        full_refresh=full_refresh,
        refresh_catalog=refresh_catalog,
        shard=shard,
        dry_run=True,
    )
    click.echo(plan_text(summary.as_dict()))


@click.command("compact")
@config_option
def compact_cmd(config_path: str) -> None:
    """Move the rows of files of another layout (shards' files, files of an older sink.buckets) into the
    current layout's files: sink.buckets files per partition; an unsharded dataset already has that
    layout. Lake tables: bin-pack small files in a new version. Holds every state lock of the source."""
    from etl.pipeline import maintenance

    config = load_config(config_path, offline=True)
    done = maintenance.compact(config)
    if config.sink.lake:
        click.echo(f"compacted {done.tables} table(s): {sum(done.files.values())} file(s) rewritten")
        return
    if not done.partitions:
        click.echo(
            f"nothing to compact: every partition holds only its {done.buckets} bucket file(s) "
            f"(sink.buckets); {done.temp_files_removed} temp file(s) removed"
        )
        return
    click.echo(
        f"compacted {done.partitions} partition(s): {sum(done.files.values())} file(s) merged away, "
        f"{done.temp_files_removed} temp file(s) removed"
    )


@click.command("vacuum")
@config_option
@click.option(
    "--retain",
    "retain",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="Keep every version younger than this (time travel, readers in flight), e.g. 7d, 12h.",
)
def vacuum_cmd(config_path: str, retain: str) -> None:
    """Lake tables: expire old versions and delete the files only they reference; holds the state lock."""
    from etl.pipeline import maintenance
    from etl.timeutil import parse_duration_ms

    config = load_config(config_path, offline=True)
    if not config.sink.lake:
        raise ConfigError(
            "etl vacuum is for lake tables (sink.format delta or iceberg); "
            "Parquet/CSV datasets keep no old versions"
        )
    try:
        retain_ms = parse_duration_ms(retain)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--retain") from None
    done = maintenance.vacuum(config, retain_ms)
    click.echo(f"vacuumed {done.tables} table(s): {sum(done.files.values())} file(s) removed")


@click.group()
def state() -> None:
    """Inspect or reset the checkpoints of a config."""


def _store(config_path: str, shard: Shard | None) -> StateStore:
    from etl.sinks.output import Output

    return Output(load_config(config_path, offline=True), shard).state_store()


shard_option = click.option(
    "--shard", type=SHARD, help="The checkpoints of shard I/N (runs with --shard I/N)."
)


@state.command("show")
@config_option
@shard_option
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option(
    "--backfill",
    is_flag=True,
    help="The history still to load after the last run, per series, and when it should be in.",
)
def state_show(config_path: str, shard: Shard | None, as_json: bool, backfill: bool) -> None:
    """Covered intervals and high-water mark per (parameter, series); or, with --backfill, the history
    still to load."""
    store = _store(config_path, shard)
    if backfill:
        from etl.pipeline.summary import Backfill

        left = Backfill.of(store.progress())
        if as_json:
            echo_json(left.as_dict())
        else:
            click.echo(left.text() or "no history left to load (as of the last run)")
        return
    rows = list(store.load().rows())
    if as_json:
        echo_json(rows)
    else:
        echo_table(rows, ["param_id", "series", "high_water", "intervals", "covered"])


@state.command("rename-source")
@config_option
@click.option(
    "--from",
    "old",
    required=True,
    metavar="NAME",
    help="The source name the output holds now; the config's source.name is the new one.",
)
def state_rename_source(config_path: str, old: str) -> None:
    """Rename the output's source to the config's source.name: every file of its rows written again under
    the new name (file names, the source column, source= folders) and its checkpoints moved, each row once.
    Parquet/CSV datasets; holds every state lock of both names. Killed, run it again: it finishes."""
    from etl.pipeline.rename import rename_source

    done = rename_source(load_config(config_path, offline=True), old)
    files = ", ".join(f"{name} {n}" for name, n in done.files.items() if n) or "none"
    click.echo(
        f"renamed source {done.old!r} to {done.new!r}: files written again: {files}; "
        f"{done.state_files} checkpoint file(s) moved"
    )


@state.command("reset")
@config_option
@click.option("--param", "params", type=int, multiple=True, metavar="ID", help="Only these parameter ids.")
@click.option("--series", "series", type=SERIES_CHOICE, multiple=True, help="Only these series.")
@click.option(
    "--from", "since", type=TIME, help="Only from this time on (ISO 8601 with an offset, or an epoch number)."
)
@shard_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def state_reset(
    config_path: str,
    params: tuple[int, ...],
    series: tuple[str, ...],
    since: int | None,
    shard: Shard | None,
    yes: bool,
) -> None:
    """Forget checkpoints; the next run re-fetches (and replaces, never duplicates) that data."""
    store = _store(config_path, shard)
    if not yes:
        if not sys.stdin.isatty():  # a prompt nobody can answer would only say "aborted"
            raise ConfigError("etl state reset asks for confirmation and there is no terminal: add --yes")
        click.confirm("Forget these checkpoints?", abort=True)
    with store.lock("state reset"):
        current = store.load()
        removed = current.reset(set(params) or None, set(series) or None, since)
        store.replace(current)
    click.echo(f"removed {removed} checkpoint(s)")
