"""Commands for analysts: query and plot the output, pull one parameter straight from the platform."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from etl.cli.params import SERIES_CHOICE, config_option, connection_option, open_client, window_options
from etl.config import load_config
from etl.errors import ConfigError
from etl.model import Series


@click.command()
@config_option
@click.argument("sql", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the result to FILE.csv or FILE.parquet instead of printing it.")
def query(config_path: str, sql: str | None, output: str | None) -> None:
    """Run SQL (DuckDB) over the output. Views: raw, average, candles, their *_named variants with
    object and parameter names, and the dimension tables. Without SQL, list the views."""
    import duckdb

    from etl.query import connect, views

    con = connect(load_config(config_path, offline=True))
    if not sql:
        click.echo("\n".join(views(con)))
        return
    try:
        relation = con.sql(sql)
    except duckdb.Error as exc:
        raise ConfigError(f"query failed: {str(exc).splitlines()[0]}") from None
    if relation is None:
        return
    if output:
        if output.endswith(".parquet"):
            relation.write_parquet(output)
        else:
            relation.write_csv(output)
        click.echo(f"wrote {output}")
    else:
        click.echo(relation.df().to_string(index=False, max_rows=200))


@click.command()
@click.argument("param_id", type=int)
@window_options(required=True, what="Export")
@click.option("--kind", type=SERIES_CHOICE, default="raw", show_default=True, help="Which series.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, metavar="FILE",
              help="FILE.csv or FILE.parquet")
@connection_option
def pull(param_id: int, start: int, end: int, kind: str, output: str, config_path: str | None) -> None:
    """One-off export of one parameter of any kind (physical, signal or calculated), in windows, with
    the run's retries; no checkpoints."""
    from etl.lookup import find_param
    from etl.pull import pull as pull_series
    from etl.pull import save

    if not output.endswith((".csv", ".parquet")):
        raise ConfigError(f"output {output}: name it .csv or .parquet")
    if start >= end:
        raise ConfigError("--from must be before --to")

    async def go():
        async with open_client(config_path) as client:
            return await pull_series(client, await find_param(client, param_id), Series(kind), start, end)

    table, counters = asyncio.run(go())
    save(table, Path(output))
    click.echo(f"wrote {table.num_rows:,} {kind} points of parameter {param_id} to {output}"
               f" ({counters['requests']} requests)")


@click.command()
@config_option
@click.argument("param_id", type=int)
@window_options(required=True, what="Plot")
@click.option("--kind", type=SERIES_CHOICE, default="raw", show_default=True, help="Which series.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, metavar="FILE", help="FILE.png")
def plot(config_path: str, param_id: int, start: int, end: int, kind: str, output: str) -> None:
    """Plot one parameter's series from the output (any parameter kind; the output knows it)."""
    from etl.plot import plot as draw

    points = draw(load_config(config_path, offline=True), param_id, kind, start, end, Path(output))
    click.echo(f"plotted {points:,} points to {output}")


COMMANDS = [query, pull, plot]
