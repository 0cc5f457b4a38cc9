"""A pipeline run in this process (no CLI, no child process)."""

from __future__ import annotations

import asyncio

from etl.pipeline.runner import Runner, RunOptions


def run(config, **options):
    """`etl run` of a parsed config without a progress display; options are RunOptions' (start, end,
    full_refresh, dry_run, shard, executor...). Returns the run's summary."""
    return asyncio.run(Runner(config, RunOptions(progress=False, **options)).run())
