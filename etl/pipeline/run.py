"""`etl.run`: the public entry point of a run, what `etl run -c` calls. It turns its arguments into
`RunOptions`, runs the `Coordinator` on an event loop of its own, tells the run's observers (lineage,
traces: etl/pipeline/observe.py) when it starts and ends, and writes the metrics file whatever the
outcome."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from os import PathLike
from typing import Literal

from etl.config import Config, load_config
from etl.errors import ConfigError, EtlError, ExitCode, Interrupted, StorageError
from etl.model import Shard
from etl.pipeline import metrics
from etl.pipeline.coordinator import Coordinator, RunOptions
from etl.pipeline.identity import check_layout
from etl.pipeline.loop import in_a_loop
from etl.pipeline.observe import observers, trace_of
from etl.pipeline.summary import RunSummary
from etl.support import allocator, optional, trace
from etl.timeutil import Time, parse_time

__all__ = ["RunSummary", "run"]


def run(
    config: Config | str | PathLike[str],
    *,
    start: Time | None = None,
    end: Time | None = None,
    full_refresh: bool = False,
    refresh_catalog: bool = False,
    shard: Shard | str | None = None,
    executor: Literal["local", "dask"] | None = None,
    scheduler: str | None = None,
    progress: bool | None = None,
    metrics_file: str | PathLike[str] | None = None,
    dry_run: bool = False,
    tune_memory: bool = False,
) -> RunSummary:
    """Fetch what the checkpoints do not cover yet, write it, checkpoint it: what `etl run -c` does.

    `config` is a YAML file's path or a `Config`. `start`/`end` (ISO 8601 with an offset, an aware
    datetime, or epoch seconds, ms or us, told apart by size) backfill another window (an end past the server's clock is cut there, less a minute, with
    a warning: nothing is checkpointed before the server could serve it); `refresh_catalog` lists every
    object's parameters whatever the fleet's catalog says (`full_refresh` does too); `shard` ("I/N") takes one shard of the parameters; `executor`
    "dask" with a `scheduler` address runs slabs on a cluster; `progress` None shows a line that updates
    itself in a Jupyter notebook and a bar on a terminal (True: a bar on stderr anywhere, False: none);
    `metrics_file` receives the run's figures in the Prometheus text format whatever the outcome;
    `tune_memory` gives the process's allocators what `etl run` gives its own (etl/support/allocator.py):
    for good and process-wide, so only when asked. Raises an `EtlError` subclass when the run fails
    or is interrupted (its `summary`, the same `RunSummary`, holds what got done); never exits the process.
    In a notebook, the kernel's interrupt stops the run as Ctrl-C stops `etl run`: the windows in flight
    are finished and checkpointed, and `Interrupted` is raised once the run has stopped.
    """
    config = config if isinstance(config, Config) else load_config(config)
    options = RunOptions(
        start=None if start is None else _time(start, "start"),
        end=None if end is None else _time(end, "end"),
        full_refresh=full_refresh,
        refresh_catalog=refresh_catalog,
        shard=Shard.parse(shard) if isinstance(shard, str) else shard,
        progress=progress,
        dry_run=dry_run,
        executor=executor,
        scheduler=scheduler,
    )
    return execute(config, options, metrics_file, tune_memory)


def execute(
    config: Config,
    options: RunOptions,
    metrics_file: str | PathLike[str] | None = None,
    tune_memory: bool = False,
) -> RunSummary:
    """A run of `options` (what `run` does once it has made them; `etl verify --repair` makes its own)."""
    dry_run = options.dry_run
    if metrics_file is not None:
        metrics.check_path(str(metrics_file))
    # Now, not in one of the run's threads (`etl run` has had it look already, and find none: etl/cli/runs.py).
    optional.pyarrow_looks_for_pandas()

    # Before the run opens its output (a lake's recovery opens tables, an Iceberg catalog is made where
    # missing): a config that would write what the output holds otherwise stops here, touching nothing.
    # A state it cannot read is the run's to report (its lock, its first write), in their own words.
    with suppress(StorageError):
        check_layout(config)
    # Lineage and the like: a missing extra is told here, before the run touches anything.
    watching = [] if dry_run else observers(config)
    if config.sink.lake and not dry_run:  # told before the platform is asked anything, as a config's mistake
        from etl.sinks.lake import load_library

        load_library(config.sink.format)
    if tune_memory:
        allocator.release_freed_memory()
    coordinator = Coordinator(config, options)
    for observer in watching:
        observer.started(coordinator.summary, options)
    try:
        with trace.tracing(trace_of(watching)):
            summary = in_a_loop(coordinator.run())
    except BaseException as exc:
        error = exc if isinstance(exc, EtlError) else Interrupted("interrupted") if _stopped(exc) else None
        if error is not None and coordinator.summary.status == "ok":  # stopped before the run could say so
            coordinator.summary.failed(error)  # the observers and the metrics file read it too
        for observer in watching:
            observer.ended(coordinator.summary, error or exc)
        if metrics_file is not None and not dry_run:
            code = error.exit_code if error is not None else ExitCode.INTERNAL
            with suppress(EtlError):  # the run's own error is the one to report
                metrics.write(str(metrics_file), coordinator.summary, config.source.name, code)
        if error is None:
            raise  # a bug: its own traceback
        error.summary = coordinator.summary
        if error is exc:
            raise
        raise error from None
    for observer in watching:
        observer.ended(summary, None)
    if metrics_file is not None and not dry_run:
        metrics.write(str(metrics_file), summary, config.source.name, ExitCode.OK)
    return summary


def _time(value: Time, name: str) -> int:
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _stopped(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
