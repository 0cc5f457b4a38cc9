"""Commands for analysts: query, plot and report on the output, pull one parameter straight from the platform."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import click

from etl.cli.params import (
    DURATION,
    config_option,
    connection_option,
    open_client,
    output_file,
    series_option,
    window_options,
)
from etl.cli.render import echo_cells, echo_json, value_text
from etl.config import load_config
from etl.errors import ConfigError, NothingToRead, QualityBelow, StorageError
from etl.model import Series

if TYPE_CHECKING:  # pyarrow and the pipeline load when a command needs them
    import pyarrow as pa

    from etl.pipeline.counts import Counts

QUERY_ROWS = 100  # rows printed; -o writes them all
NUMERIC_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER"}
NUMERIC_TYPES |= {"UBIGINT", "FLOAT", "DOUBLE", "DECIMAL"}


@click.command()
@config_option
@click.argument("sql", required=False)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write the result to FILE.csv or FILE.parquet instead of printing it.",
)
def query(config_path: str, sql: str | None, output: str | None) -> None:
    """Run SQL (DuckDB) over the output; print the first 100 rows as a table, or write them all with -o.

    Views: raw, average, candles and quality (a row per parameter and day of raw data), their *_named
    variants (object_name, param_name and unit joined), and the dimension tables (objects, units,
    parameters, zones, classifiers, room_types, rooms, commands). Without SQL, list the views."""
    if output:
        output_file(output, (".csv", ".parquet"))
    config = load_config(config_path, offline=True)
    import duckdb

    from etl.dataset.query import connect, views

    con = connect(config)
    present = views(con)
    if not present:  # DuckDB would only say that the table does not exist
        raise NothingToRead(
            f"query failed: no output yet in {config.sink.path}: etl run -c {config_path} writes it"
        )
    if not sql:
        click.echo("\n".join(present))
        return
    try:
        relation = con.sql(sql)
    except duckdb.CatalogException as exc:
        raise ConfigError(f"query failed: {str(exc).splitlines()[0]} (views: {', '.join(present)})") from None
    except duckdb.Error as exc:
        raise ConfigError(f"query failed: {str(exc).splitlines()[0]}") from None
    if relation is None:
        return
    if output:
        try:
            if output.lower().endswith(".parquet"):
                relation.write_parquet(output)
            else:
                relation.write_csv(output)
        except duckdb.IOException as exc:
            raise StorageError(f"cannot write {output}: {str(exc).splitlines()[0]}") from None
        click.echo(f"wrote {output}")
    else:
        columns, types = relation.columns, [str(t) for t in relation.types]
        rows = relation.limit(QUERY_ROWS + 1).fetchall()
        right = {i for i, t in enumerate(types) if t.split("(")[0] in NUMERIC_TYPES}
        echo_cells(columns, [[value_text(v) for v in row] for row in rows[:QUERY_ROWS]], right)
        if len(rows) > QUERY_ROWS:
            click.echo(
                f"(the first {QUERY_ROWS} rows; more follow: add a LIMIT, or -o FILE.csv for them all)"
            )
        else:
            click.echo(f"({len(rows) or 'no'} row{'' if len(rows) == 1 else 's'})")


@click.command()
@click.argument("param_id", type=int)
@window_options(required=True, what="Export")
@series_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    required=True,
    metavar="FILE",
    help="FILE.csv or FILE.parquet",
)
@connection_option
def pull(param_id: int, start: int, end: int, series: str, output: str, config_path: str | None) -> None:
    """One-off export of one parameter of any kind (physical, signal or calculated), in windows, with
    the run's retries; no checkpoints."""
    path = output_file(output, (".csv", ".parquet"))
    if start >= end:
        raise ConfigError("--from must be before --to")
    from etl.client.lookup import find_param
    from etl.pipeline.pull import pull as pull_series
    from etl.pipeline.pull import save

    async def go() -> tuple[pa.Table, Counts]:
        async with open_client(config_path) as client:
            return await pull_series(client, await find_param(client, param_id), Series(series), start, end)

    table, counts = asyncio.run(go())
    save(table, path)
    click.echo(
        f"wrote {table.num_rows:,} {series} points of parameter {param_id} to {output}"
        f" ({counts.requests} requests)"
    )


@click.command()
@config_option
@click.argument("param_id", type=int)
@window_options(required=True, what="Plot")
@series_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    required=True,
    metavar="FILE",
    help="FILE.png or FILE.svg",
)
def plot(config_path: str, param_id: int, start: int, end: int, series: str, output: str) -> None:
    """Plot one parameter's series from the output (any parameter kind; the output knows it).

    Needs matplotlib, which the plot extra brings: pip install 'etl[plot]'."""
    path = output_file(output, (".png", ".svg"))
    config = load_config(config_path, offline=True)
    from etl.dataset.plot import plot as draw

    points = draw(config, param_id, Series(series), start, end, path)
    click.echo(f"plotted {points:,} points to {output}")


@click.command()
@config_option
@window_options(
    required=False, what="Report on the UTC days", end_note="exclusive; default: the end of the data"
)
@click.option(
    "--stale-after",
    type=DURATION,
    default="3h",
    show_default=True,
    help="A parameter with no point in this long before the report's end is stale.",
)
@click.option(
    "--flatline-after",
    type=DURATION,
    default="2h",
    show_default=True,
    help="Report a parameter-day whose value stays the same this long (signal parameters aside).",
)
@click.option(
    "--fail-under",
    type=click.FloatRange(0, 1),
    metavar="RATIO",
    help="Exit 9 if a parameter's completeness over the report is below RATIO (e.g. 0.95).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Parameters listed in each table.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    metavar="FILE.html",
    help="Also write a self-contained HTML report (heatmap, tables; no network needed to view it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of text.")
def report(
    config_path: str,
    start: int | None,
    end: int | None,
    stale_after: int,
    flatline_after: int,
    fail_under: float | None,
    top: int,
    output: str | None,
    as_json: bool,
) -> None:
    """Data quality of the raw series from the output's quality dataset: the least complete parameters
    (with object, name and unit), stale parameters and flatlines; by default over the last 7 days."""
    if output:
        output_file(output, (".html", ".htm"))
    config = load_config(config_path, offline=True)
    from etl.dataset.report import ReportOptions, build, label, percent, text
    from etl.dataset.report_html import render
    from etl.support.terminal import printable_lines

    options = ReportOptions(start, end, stale_after, flatline_after, fail_under, top)
    result = build(config, options)
    if output:
        try:
            Path(output).write_text(render(result), encoding="utf-8")
        except OSError as exc:
            raise StorageError(f"cannot write {output}: {exc.strerror or exc}") from None
    if as_json:
        echo_json(result.as_dict())
    else:
        click.echo(printable_lines(text(result)))
        if output:
            click.echo(f"\nwrote {output}")
    if fail_under is not None and result.below_count:
        worst = result.below[0]
        raise QualityBelow(
            f"{result.below_count} parameter(s) below {percent(fail_under)} complete "
            f"(least: {label(worst)}, {percent(worst['completeness'])})"
        )
