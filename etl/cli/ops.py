"""Commands for the first hour with an instance and for keeping a deployment healthy: init, doctor,
verify."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click

from etl.cli.params import DURATION, SAMPLE, SHARD, TIME, config_option, output_file, window_options
from etl.cli.render import echo_json
from etl.errors import ConfigError, EtlError, Unhealthy, error_from
from etl.model import Shard
from etl.support import allocator, startup


def _password() -> str:
    password = os.environ.get("ETL_PASSWORD")
    if password:
        return password
    if not sys.stdin.isatty():
        raise ConfigError("no password: set ETL_PASSWORD (there is no terminal to ask on)")
    return click.prompt("Password", hide_input=True)


@click.command("init")
@click.option(
    "--base-url",
    required=True,
    metavar="URL",
    help="The instance, e.g. https://HOST (the base path /sem-restservices is found if missing).",
)
@click.option(
    "--username", required=True, metavar="NAME", help="The login (password: ETL_PASSWORD or a prompt)."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write the config there (default: print it, unless --json).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--start", type=TIME, help="Where the first run starts (default: 7 days before today).")
@click.option(
    "--sink-path", metavar="PATH", help="Where the data goes (default: output/HOST beside the config file)."
)
@click.option(
    "--ca-bundle",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="The private CA the server's certificate is from (PEM).",
)
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
def init_cmd(
    base_url: str,
    username: str,
    output: Path | None,
    as_json: bool,
    start: int | None,
    sink_path: str | None,
    ca_bundle: Path | None,
    force: bool,
) -> None:
    """Find out how an instance behaves, politely (a few dozen requests), and write a config for it.

    Probes: the base path, how sign-in takes the credentials, the objects and parameters, whether
    the paged search agrees with the lists, the silent cap and the default of `count`, the format of
    stamps, the latency (and a concurrency for it), how an ended session and errors are answered.
    """
    from dataclasses import replace

    from etl.client.options import ca_context
    from etl.ops import init
    from etl.ops.probe import OPTIONS, probe

    if output is not None and output.exists() and not force:
        raise ConfigError(f"{output} exists: pass --force to replace it")
    options = OPTIONS
    if ca_bundle is not None:
        options = replace(options, verify=ca_context(ca_bundle, "--ca-bundle"))
    found = asyncio.run(probe(base_url, username, _password(), options))
    folder = os.path.abspath(output.parent) if output is not None else None
    choices = init.Choices(
        username,
        start,
        None if sink_path is None else init.placed(sink_path, folder),
        None if ca_bundle is None else Path(init.placed(str(ca_bundle), folder)),
    )
    text = init.render(found, choices)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {output}: {exc.strerror}") from None
    if as_json:
        echo_json(found.as_dict())
        return
    if output is None:
        click.echo(text, nl=False)
        for line in init.report(found):
            click.echo(line.line(), err=True)
        return
    for line in init.report(found):
        click.echo(line.line())
    click.echo(f"wrote {output}; next:  ETL_PASSWORD=... etl plan -c {output}  then  etl run -c {output}")


@click.command("doctor")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON (for schedulers).")
@click.option(
    "--max-age",
    type=DURATION,
    metavar="DURATION",
    help="Fail when the last successful run finished longer ago than this, e.g. 2h, 1d.",
)
@click.option(
    "--retain",
    type=DURATION,
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="Lake tables: versions older than this should have been vacuumed (etl vacuum --retain).",
)
@click.option("--offline", is_flag=True, help="Skip the server probes (no sign-in, no request).")
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(["server", "checkpoints", "runs", "locks", "leftovers", "files", "lake", "sources"]),
    help="Leave out a check (repeatable).",
)
@click.option("--strict", is_flag=True, help="Warnings fail too.")
def doctor_cmd(
    config_path: str,
    as_json: bool,
    max_age: int | None,
    retain: int,
    offline: bool,
    skip: tuple[str, ...],
    strict: bool,
) -> None:
    """Check a deployment without changing it: the server against the config, checkpoints, the last
    runs, locks, leftovers of killed runs, files and lake tables, source names.

    Each finding is one line (ok, warn, fail) with what to do. Exits 0 when healthy (warnings
    allowed, unless --strict) and 10 when something needs a person.
    """
    from etl.config import load_config
    from etl.ops.doctor import Limits, diagnose

    config = load_config(config_path, offline=offline)
    limits = Limits(max_age_ms=max_age, retain_ms=retain)
    diagnosis = diagnose(config, config_path, limits, server=not offline, skip=skip)
    if as_json:
        echo_json(diagnosis.as_dict(strict))
    else:
        for finding in diagnosis.findings:
            click.echo(finding.line())
        if diagnosis.requests_made:
            click.echo(f"({diagnosis.requests_made} requests to the server)")
    if not diagnosis.healthy(strict):
        needing = [f for f in diagnosis.findings if f.status == "fail" or strict and f.status == "warn"]
        raise Unhealthy(f"doctor: {len(needing)} finding(s) need a person (first: {needing[0].check})")


@click.command("verify")
@config_option
@window_options(required=False, what="Verify the windows checkpointed")
@click.option(
    "--sample",
    type=SAMPLE,
    default="all",
    show_default=True,
    help="The share of the checkpointed windows read again: a fraction (0.01) or a percentage (1%); each "
    "parameter's newest window first, the rest at random.",
)
@click.option(
    "--seed", type=int, metavar="N", help="Draw the sample of an earlier verify again (each prints its seed)."
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    metavar="N",
    help="Send at most N requests (sign-in and listing included); sampled windows past them are counted "
    "as not verified.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Fetch the windows that differ again and rewrite them as a run does (under the run lock), then "
    "read them again.",
)
@click.option("--shard", type=SHARD, help="Verify shard I of N (its checkpoints and files).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (for schedulers).")
@click.option(
    "-o", "--output", metavar="FILE.html", help="Also write the result as a self-contained HTML page."
)
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write the verify's figures there (etl_verify_*) in the Prometheus text format, whatever the outcome.",
)
def verify_cmd(
    config_path: str,
    start: int | None,
    end: int | None,
    sample: float,
    seed: int | None,
    max_requests: int | None,
    repair: bool,
    shard: Shard | None,
    as_json: bool,
    output: str | None,
    metrics_file: str | None,
) -> None:
    """Read stored windows again from the platform and compare them row for row with the output: rows
    missing, rows extra and values changed, per parameter, series and window, with examples.

    It reads what the checkpoints claim (but the newest stretch the next run reads again anyway),
    through the client a run uses, and takes no lock. Exits 0 when the output equals the source, 11
    when windows differ (--repair rewrites them, then reads them again). The result is kept in
    _verify/ (etl doctor and etl report show the last one).
    """
    from etl.config import load_config
    from etl.ops.verify import VerifyOptions, metrics, verify
    from etl.pipeline.metrics import check_path

    config = load_config(config_path)
    if output is not None:
        output_file(output, (".html", ".htm"))
    if metrics_file is not None:
        check_path(metrics_file)
    options = VerifyOptions(start, end, sample, seed, max_requests, repair, shard)
    if startup.own_process():  # what `etl run` gives its own process: freed buffers go back to the OS
        allocator.release_freed_memory()
    try:
        with startup.without_pandas():  # as etl run: nothing here converts to pandas
            result = verify(config, options)
    except EtlError as exc:
        if metrics_file is not None:
            metrics.write(metrics_file, config.source.name, str(shard or ""), None, exc.exit_code)
        raise
    command = f"etl verify -c {config_path}" + (f" --shard {shard}" if shard else "")
    if output is not None:
        from etl.ops.verify import render  # DuckDB comes with the report's page: loaded only for -o

        render.write_html(output, result, command)
    if metrics_file is not None:
        metrics.write(metrics_file, config.source.name, str(shard or ""), result, result.exit_code)
    if as_json:
        echo_json(result.as_dict(command))
    else:
        click.echo(result.text(command))
    if result.exit_code:
        raise error_from(result.verdict(command), result.exit_code)
