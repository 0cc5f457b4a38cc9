"""Command line: parse, call the library, print."""

from __future__ import annotations

import click

from etl.emulator.cli import emulator


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Export time series from the monitoring platform into partitioned datasets."""


cli.add_command(emulator)


def main() -> None:
    cli()
