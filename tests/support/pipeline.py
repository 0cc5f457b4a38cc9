"""A pipeline run in this process (no CLI, no child process), through the public API."""

from __future__ import annotations

from typing import Any

import etl
from etl.config import Config
from etl.pipeline.summary import RunSummary


def run(config: Config, **options: Any) -> RunSummary:
    """`etl.run` of a parsed config (no progress display); options are etl.run's (start, end,
    full_refresh, dry_run, shard, executor, scheduler...)."""
    return etl.run(config, **options)
