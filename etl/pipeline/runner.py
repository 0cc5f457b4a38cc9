"""A run: discover, plan, run slabs on an executor, checkpoint each slab once its files are durable.

The coordinator (this module) signs in, lists parameters, plans slabs against the checkpoints and writes
the dimension tables; an executor (etl/executors.py) runs the slabs, here or on a Dask cluster, each
through etl/slab.py's process_slab; the coordinator commits a slab's windows to the checkpoints only
after its result says the files are swapped in.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import orjson

from etl.client import ClientStats, MonitoringClient
from etl.config import Config, load_config
from etl.errors import ConfigError, DataError, EtlError, ExitCode, Interrupted, error_from
from etl.model import Shard, Windows
from etl.pipeline import dimensions, metrics
from etl.pipeline.build import Build
from etl.pipeline.dimensions import Rows
from etl.pipeline.discover import discover
from etl.pipeline.executors import Executor, dask_executor, execute, local_executor
from etl.pipeline.identity import check_source_identity
from etl.pipeline.plan import HORIZON_MARGIN_MS, Fleet, Plan, PlanOptions, horizon, spans_for
from etl.pipeline.progress import Progress
from etl.pipeline.slab import STOP_GRACE, SlabJob, SlabResult
from etl.state.coverage import Coverage, intervals_of
from etl.state.store import StateStore
from etl.storage import spools
from etl.support import allocator, cpus, interrupts, redact
from etl.timeutil import Time, iso, now_ms, parse_time

if TYPE_CHECKING:  # the lake modules load for lake formats only
    from etl.sinks.lake.committer import Committer, Landed

__all__ = ["RunOptions", "RunSummary", "Runner", "run"]

HORIZON_MARGIN_S = HORIZON_MARGIN_MS // 1000
MERGE_AFTER = 1 << 18  # committed windows held (24 bytes each) before they are merged into the coverage

log = logging.getLogger("etl")


@dataclass(frozen=True)
class RunOptions:
    start: int | None = None  # backfill bounds; default: the config's window
    end: int | None = None
    full_refresh: bool = False
    shard: Shard | None = None
    progress: bool | None = None  # None: a bar when stderr is a terminal
    dry_run: bool = False  # plan only
    executor: str | None = None  # "local" or "dask"; default: the config's executor.kind
    scheduler: str | None = None  # dask scheduler address; default: the config's executor.address


@dataclass
class SeriesTotals:
    slabs: int = 0
    windows: int = 0
    points: int = 0
    files: set[str] = field(default_factory=set)


@dataclass
class RunSummary:
    run_id: str
    output: str
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    # This process's CPU over the same span (all its threads; a dask cluster's workers are not in it):
    # what a schedule watches to see run 8,760 cost what run 1 did.
    cpu_seconds: float = 0.0
    status: str = "ok"
    error: str | None = None
    objects: int = 0
    parameters: int = 0
    window: tuple[int, int] | None = None
    planned: dict = field(default_factory=dict)
    series: dict[str, SeriesTotals] = field(default_factory=lambda: defaultdict(SeriesTotals))
    warnings: Counter = field(default_factory=Counter)
    failed_windows: list[str] = field(default_factory=list)
    client: ClientStats = field(default_factory=ClientStats)
    temp_files_removed: int = 0
    executor: str = "local"
    shard: Shard | None = None
    quality_rows: int = 0  # (parameter, day) rows written to the quality dataset
    lake_commits: int = 0  # lake tables: grouped commits of the series tables
    upkeep: dict | None = None  # lake tables: what the run's maintenance did
    dimensions: list[str] = field(default_factory=list)  # the dimension tables written
    lowest_completeness: float | None = None  # among them

    def add_quality(self, rows: int, lowest: float | None) -> None:
        self.quality_rows += rows
        if lowest is not None:
            self.lowest_completeness = (
                lowest if self.lowest_completeness is None else min(self.lowest_completeness, lowest)
            )

    def as_dict(self) -> dict:
        counters = dict(self.warnings)
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "started": datetime.fromtimestamp(self.started, tz=UTC).isoformat(timespec="seconds"),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "window": {"start": iso(self.window[0]), "end": iso(self.window[1])} if self.window else None,
            "output": self.output,
            "objects": self.objects,
            "parameters": self.parameters,
            "planned": self.planned,
            "series": {
                str(name): {"slabs": t.slabs, "windows": t.windows, "points": t.points, "files": len(t.files)}
                for name, t in sorted(self.series.items())
            },
            "points": sum(t.points for t in self.series.values()),
            **self.client.as_dict(),
            "splits": counters.pop("splits", 0),
            "continuations": counters.pop("continuations", 0),
            "warnings": {k: v for k, v in sorted(counters.items()) if k != "requests"},
            "failed_windows": self.failed_windows[:50],
            "failed_window_count": len(self.failed_windows),
            "temp_files_removed": self.temp_files_removed,
            "executor": self.executor,
            "shard": str(self.shard) if self.shard else None,
            "quality": {"rows": self.quality_rows, "lowest_completeness": self.lowest_completeness},
            "dimensions": self.dimensions,
            **(
                {"lake": {"commits": self.lake_commits, "upkeep": self.upkeep}}
                if self.upkeep is not None or self.lake_commits
                else {}
            ),
        }


class Runner:
    def __init__(self, config: Config, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.build = Build(config, options.shard)
        self.data = self.build.data
        self.store = self.build.state_store()
        run_id = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
        self.summary = RunSummary(run_id=run_id, output=self.data.display(), shard=options.shard)
        self.build.run_id = run_id
        self.stop = asyncio.Event()
        self.fatal: BaseException | None = None
        self.interrupted = False
        self.executing = False  # slabs have started: a signal stops gracefully instead of cancelling
        self.committed: list[
            tuple[np.ndarray, np.ndarray, np.ndarray]
        ] = []  # coverage rows of committed slabs
        self.scheduler: str | None = None  # set by run(): a Dask scheduler address, or None to run here
        # Records and dimension tables from the platform that could not be used, one line each.
        self.left_out: list[str] = []

    def _window(self) -> tuple[int, int]:
        window = self.config.window
        start = self.options.start if self.options.start is not None else window.start_ms
        end = self.options.end if self.options.end is not None else window.end_ms(now_ms())
        if start >= end:
            raise ConfigError(f"nothing to do: window start {iso(start)} is not before its end {iso(end)}")
        return start, end

    def _up_to_the_server_clock(self, start: int, end: int, server_now: int, coverage: Coverage) -> int:
        """The window's end, cut where the server's clock stands (less a margin): a window is never
        checkpointed past what the server could have served. Names checkpoints already past it."""
        limit = horizon(server_now)
        ahead = coverage.end > limit
        if ahead.any():
            keys = len(np.unique(coverage.key[ahead]))
            self.summary.warnings["checkpoints_past_the_server_clock"] = keys
            log.warning(
                "checkpoints of %d (parameter, series) reach %s, past the server's clock (%s): a run whose "
                "window ended in the future set them, and points since that run were never fetched; repair: "
                "etl state reset -c CONFIG --from TIME (TIME: when that run started, see _runs/), then run again",
                keys,
                iso(int(coverage.end[ahead].max())),
                iso(server_now),
            )
        if end <= limit:
            return end
        if start >= limit:
            raise ConfigError(
                f"nothing to fetch yet: the window starts at {iso(start)}, after the server's clock "
                f"({iso(server_now)}) less {HORIZON_MARGIN_S} s"
            )
        if self.options.end is not None or self.config.window.end != "now":
            log.warning(
                "the window's end %s is in the future (the server's clock: %s): fetching up to %s; "
                "the next run picks up from there",
                iso(end),
                iso(server_now),
                iso(limit),
            )
        return limit

    def _scheduler(self) -> str | None:
        """The Dask scheduler to use, or None to run here."""
        kind = self.options.executor or ("dask" if self.options.scheduler else self.config.executor.kind)
        if kind == "local":
            return None
        address = self.options.scheduler or self.config.executor.address
        if not address:
            raise ConfigError(
                "the dask executor needs --scheduler ADDRESS (or executor.address in the config)"
            )
        return address

    async def run(self) -> RunSummary:
        started, cpu = time.monotonic(), time.process_time()
        restore = self._handle_signals()
        try:
            if interrupts.pending():  # a Ctrl-C while etl loaded, whose KeyboardInterrupt was lost
                raise Interrupted("interrupted before the run started")
            self.scheduler = self._scheduler()
            if self.data.local:
                asyncio.get_running_loop().set_default_executor(_workers())
            if not self.options.dry_run:
                self.data.check_writable()
                with self.store.lock(), spools.held():
                    await self._run_locked()
            else:
                await self._run_locked()
            if self.interrupted:  # a signal whose cancellation was absorbed (an await that suppresses it)
                raise Interrupted("interrupted: finished windows are checkpointed; run again to resume")
        except BaseException as exc:  # the run's record must not say "ok" whatever stopped it
            stopped = isinstance(exc, Interrupted | KeyboardInterrupt | asyncio.CancelledError)
            self.summary.status = "interrupted" if stopped else "failed"
            self.summary.error = redact.redact(
                str(exc) if isinstance(exc, EtlError) else f"{type(exc).__name__}: {exc}".removesuffix(": ")
            )
            raise
        finally:
            restore()
            self.summary.seconds = time.monotonic() - started
            self.summary.cpu_seconds = time.process_time() - cpu
            if not self.options.dry_run and self.summary.window is not None:
                self._save_summary()
        return self.summary

    def _save_summary(self) -> None:
        try:
            body = orjson.dumps(self.summary.as_dict(), option=orjson.OPT_INDENT_2)
            self.data.write_atomic(f"_runs/{self.summary.run_id}.json", body)
        except EtlError as exc:
            log.warning("could not write the run summary: %s", exc)

    async def _run_locked(self) -> None:
        summary = self.summary
        start, end = self._window()  # a window with nothing in it is refused before any I/O
        if not self.options.dry_run:
            summary.temp_files_removed = self.data.remove_temp_files() + spools.sweep()
        coverage = self.store.load()
        recovering = None
        if self.build.lake is not None and not self.options.dry_run:
            # Opening the tables (and importing their library) goes on while the platform answers the
            # sign-in and the listings; planning waits for it.
            recovering = asyncio.ensure_future(asyncio.to_thread(self._recover, coverage))
        summary.window = (start, end)
        async with self.build.client(summary.client) as client:
            try:
                await client.sign_in()
                server_now = client.server_now()
                found = await discover(client, self.config.select)
            finally:
                if recovering is not None:
                    await recovering
            # After recovery: the checkpoints the lake tables carry are checked against the clock too.
            end = self._up_to_the_server_clock(start, end, server_now, coverage)
            summary.window = (start, end)
            # Quality rows describe the config's window (a backfill's --to does not end a day early), cut
            # at the server's clock too.
            self.build.window_end = min(self.config.window.end_ms(now_ms()), horizon(server_now))
            allocator.trim()
            await asyncio.to_thread(check_source_identity, self.config, coverage, found.params.id)
            # A shard fetches its own parameters; its dimension tables still name every parameter.
            shard = self.options.shard
            mine = found.params.of_shard(shard)
            summary.objects, summary.parameters = len(found.object_ids), len(mine)
            extract = self.config.extract
            # From the whole fleet: every shard of a dataset decides alike.
            buckets = await asyncio.to_thread(
                self.build.decide_buckets,
                self.store,
                len(found.params),
                len(coverage) > 0,
                record=not self.options.dry_run,
            )
            plan = Plan(
                Fleet(mine, buckets),
                coverage,
                PlanOptions(start, end, self.options.full_refresh, self.config.window.overlap),
                self.config.series,
                spans_for(extract.raw_window, extract.aggregate_window),
                by_object="object_id" in self.config.sink.partition_by,
            )
            summary.planned = plan.summary()
            if self.options.dry_run:
                return
            # Reference tables are fetched and written beside the series: the first windows need not wait.
            snapshot = (
                asyncio.ensure_future(
                    self._dimensions(client, found.object_ids, found.objects, found.parameters)
                )
                if self.config.dimensions.enabled
                else None
            )
            del found, mine  # the plan holds the fleet column-wise: no object per parameter is kept
            try:
                async with self._executor(client, self.scheduler) as executor:
                    summary.executor = executor.name
                    await self._execute(executor, plan, coverage)
            except BaseException:
                if snapshot is not None:
                    snapshot.cancel()
                raise
            if snapshot is not None:
                if self.interrupted:  # its requests may be as stuck as the windows were
                    snapshot.cancel()
                with suppress(asyncio.CancelledError):
                    await snapshot
            self.left_out[:0] = client.skipped
        if self.left_out:
            summary.warnings["records_left_out"] += len(self.left_out)
        if summary.series:
            await asyncio.to_thread(self._compact, coverage)
        if self.build.lake is not None and self.fatal is None and not self.interrupted:
            from etl.pipeline.maintenance import upkeep  # imports the lake modules: lake formats only

            summary.upkeep = await asyncio.to_thread(upkeep, self.build, end)
        if self.fatal is not None:
            raise self.fatal
        if self.interrupted:
            raise Interrupted("interrupted: finished windows are checkpointed; run again to resume")
        if summary.failed_windows:
            raise DataError(
                f"{len(summary.failed_windows)} window(s) failed (first: {summary.failed_windows[0]}); "
                "the rest is written and checkpointed; the next run retries them"
            )
        if self.left_out:
            raise DataError(
                f"{len(self.left_out)} record(s) or table(s) the platform sent could not be used and are "
                f"left out (first: {self.left_out[0]}); the rest is written and checkpointed"
            )

    def _recover(self, coverage: Coverage) -> None:
        # Imported here: the lake modules (pyarrow.dataset, deltalake, pyiceberg) load for lake formats only.
        from etl.sinks.lake.writer import recover

        lake = self.build.lake
        assert lake is not None
        recover([lake.series(s) for s in self.config.series], self.store, coverage, self.build.app)

    @asynccontextmanager
    async def _executor(self, client: MonitoringClient, scheduler: str | None):
        if scheduler is None:
            yield local_executor(client, self.build, self.stop)
        else:
            async with dask_executor(scheduler) as executor:
                yield executor

    async def _dimensions(
        self, client: MonitoringClient, object_ids: list[int], objects: Rows, parameters: Rows
    ) -> None:
        def due() -> tuple[bool, dict]:
            stale, fresh = dimensions.due(
                self.store.snapshot(),
                object_ids,
                self.config.sink.format,
                self.config.dimensions.refresh,
                now_ms(),
            )
            return stale or self.options.full_refresh or not self.build.references_written(), fresh

        fetch, fresh = await asyncio.to_thread(due)
        tables, failed = await dimensions.collect(client, object_ids, objects, parameters, fetch)
        self.left_out += failed
        self.summary.dimensions = list(tables)
        await asyncio.to_thread(self.build.write_dimensions, tables)
        if fetch and not failed:
            await asyncio.to_thread(self.store.note_snapshot, fresh)

    def _merge_committed(self, coverage: Coverage) -> None:
        if self.committed:
            coverage.add_arrays(*(np.concatenate(column) for column in zip(*self.committed, strict=True)))
            self.committed = []

    def _compact(self, coverage: Coverage) -> None:
        """The run's last windows merged into the coverage, then folded into a new base."""
        self._merge_committed(coverage)
        self.store.compact(coverage)

    def _jobs(self, executor: Executor, plan: Plan) -> Iterator[SlabJob]:
        config = self.build.remote_config() if executor.remote else self.config
        for slab in plan.slabs():
            yield SlabJob(config, slab, self.options.shard)

    async def _execute(self, executor: Executor, plan: Plan, coverage: Coverage) -> None:
        progress = Progress(plan.windows, self.options.progress)
        commit_lock = asyncio.Lock()
        checkpoints = _GroupCommit(self.store)

        def fail(_job: SlabJob, exc: BaseException) -> None:
            self.fatal = self.fatal or exc
            self.stop.set()

        async def commit(job: SlabJob, result: SlabResult) -> None:
            for failure in result.failures:
                self.summary.failed_windows.append(failure.describe())
                if failure.fatal and self.fatal is None:
                    self.fatal = failure.error or error_from(failure.message, failure.exit_code)
                    self.stop.set()
            if result.staged is not None and committer is not None:
                # Lake tables: the committer commits the slab with its group, then checkpoints them.
                landed = await committer.submit(result.staged)
                result.lake, result.files = (landed.table, landed.version), landed.files
            # Checkpoint what was written even if some windows failed: failed ones stay open.
            if result.done:
                if result.staged is None:
                    await checkpoints.commit(result.done)
                async with commit_lock:
                    # Merged into the coverage a few hundred thousand at a time, not per slab: each merge
                    # copies the whole coverage while other slabs hold their data.
                    self.committed.append(intervals_of(result.done))
                    if sum(len(rows[0]) for rows in self.committed) >= MERGE_AFTER:
                        await asyncio.to_thread(self._merge_committed, coverage)
                # A slab's freed buffers go back to the OS, not to the next one's peak; malloc_trim walks
                # every arena (about 1.5 ms), so not on the event loop.
                await asyncio.to_thread(allocator.trim)
                totals = self.summary.series[result.series]
                totals.slabs += 1
                totals.windows += len(result.done)
                totals.points += result.points
                totals.files.update(result.files)
                self.summary.add_quality(result.quality_rows, result.lowest_completeness)
            self.summary.warnings.update(result.counters)
            if result.client is not None:
                self.summary.client.add(result.client)
            progress.advance(result.windows, result.points)

        committer: Committer | None = None
        if self.build.lake is not None:
            from etl.sinks.lake.committer import Committer  # noqa: F811 - the class, not only its type

            if executor.remote:  # workers write data files into the tables: they must exist
                await asyncio.to_thread(self.build.lake.prepare, list(self.config.series))

            def landed(commit: Landed) -> None:
                self.summary.lake_commits += 1

            committer = Committer(
                self.build.lake,
                self.store,
                (self.build.app, self.build.run_id),
                self.config.sink.commit,
                landed,
            )
            for series, planned in plan.summary().items():
                committer.expect(series, planned["slabs"])
        self.executing = True
        try:
            await execute(
                executor,
                self._jobs(executor, plan),
                commit,
                fail,
                self.stop,
                committer.drain if committer is not None else None,
            )
        finally:
            if committer is not None:
                committer.discard()
            progress.close()

    def _handle_signals(self) -> Callable[[], None]:
        """SIGINT and SIGTERM for the whole run, through the loop (a KeyboardInterrupt raised inside one of
        the loop's callbacks can be lost): while slabs run, a graceful stop; before, the run is cancelled.
        Returns what puts the previous handlers back."""
        # Signal handlers belong to the main thread; a run driven from another thread is stopped by its owner.
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_signal(signum: int) -> None:
            if not self.executing:
                self.interrupted = True
                if task is not None:
                    task.cancel()
                return
            if not self.interrupted:
                log.warning(
                    "%s received: stopping after the windows in flight (those still out in %gs are "
                    "cancelled and stay open)",
                    signal.Signals(signum).name,
                    STOP_GRACE,
                )
            self.interrupted = True
            self.stop.set()

        previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        for signum in previous:
            loop.add_signal_handler(signum, on_signal, signum)

        def restore() -> None:
            for signum, handler in previous.items():
                loop.remove_signal_handler(signum)
                signal.signal(signum, handler)  # asyncio would leave SIG_DFL: keep the CLI's handlers

        return restore


def run(
    config: Config | str | PathLike[str],
    *,
    start: Time | None = None,
    end: Time | None = None,
    full_refresh: bool = False,
    shard: Shard | str | None = None,
    executor: Literal["local", "dask"] | None = None,
    scheduler: str | None = None,
    progress: bool | None = False,
    metrics_file: str | PathLike[str] | None = None,
    dry_run: bool = False,
) -> RunSummary:
    """Fetch what the checkpoints do not cover yet, write it, checkpoint it: what `etl run -c` does.

    `config` is a YAML file's path or a `Config`. `start`/`end` (ISO 8601 with an offset, an aware
    datetime, or epoch seconds, ms or us, told apart by size) backfill another window (an end past the server's clock is cut there, less a minute, with
    a warning: nothing is checkpointed before the server could serve it); `shard` ("I/N") takes one shard of the parameters; `executor`
    "dask" with a `scheduler` address runs slabs on a cluster; `metrics_file` receives the run's figures
    in the Prometheus text format whatever the outcome. Raises an `EtlError` subclass when the run fails
    or is interrupted (its `summary` holds what got done); never exits the process.
    """
    config = config if isinstance(config, Config) else load_config(config)
    options = RunOptions(
        start=None if start is None else _time(start, "start"),
        end=None if end is None else _time(end, "end"),
        full_refresh=full_refresh,
        shard=Shard.parse(shard) if isinstance(shard, str) else shard,
        progress=progress,
        dry_run=dry_run,
        executor=executor,
        scheduler=scheduler,
    )
    if metrics_file is not None:
        metrics.check_path(str(metrics_file))
    # pyarrow loads pandas at its first conversion: load it now, not mid-run. `etl run` keeps it out of
    # its process (etl/cli/runs.py): pyarrow works without it.
    with suppress(ImportError):
        import pandas  # noqa: F401

    allocator.release_freed_memory()
    runner = Runner(config, options)
    try:
        summary = _in_a_loop(runner.run())
    except BaseException as exc:
        error = exc if isinstance(exc, EtlError) else Interrupted("interrupted") if _stopped(exc) else None
        if metrics_file is not None and not dry_run:
            code = error.exit_code if error is not None else ExitCode.INTERNAL
            with suppress(EtlError):  # the run's own error is the one to report
                metrics.write(str(metrics_file), runner.summary.as_dict(), config.source.name, code)
        if error is None:
            raise  # a bug: its own traceback
        error.summary = runner.summary.as_dict()
        if error is exc:
            raise
        raise error from None
    if metrics_file is not None and not dry_run:
        metrics.write(str(metrics_file), summary.as_dict(), config.source.name, ExitCode.OK)
    return summary


def _time(value: Time, name: str) -> int:
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _stopped(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)


def _in_a_loop(work: Coroutine[Any, Any, RunSummary]) -> RunSummary:
    """The run on uvloop where it exists (a run spends its loop's time in socket reads, which uvloop does
    in C); in a thread of its own where this thread already runs a loop (a notebook)."""
    try:
        import uvloop

        start: Callable[[Coroutine[Any, Any, RunSummary]], RunSummary] = uvloop.run
    except ImportError:
        start = asyncio.run
    if _loop_running():
        with ThreadPoolExecutor(1, thread_name_prefix="etl-run") as pool:
            return pool.submit(start, work).result()
    if threading.current_thread() is not threading.main_thread():
        return start(work)
    # SIGTERM stops like Ctrl-C: while windows are fetched, after those in flight (the runner's own
    # handlers); before, by unwinding (a temp file left behind is swept by the next run).
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return start(work)
    finally:
        signal.signal(signal.SIGTERM, previous)


class _GroupCommit:
    """Slabs' windows checkpointed in groups: those whose files became durable while a checkpoint was
    being written go into the next one together. The end of a run finishes dozens of slabs at once,
    whose checkpoints (a file and an fsync each) were written one after another while nothing else ran."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.lock = asyncio.Lock()
        self.waiting: list[tuple[Windows, asyncio.Future[None]]] = []

    async def commit(self, windows: Windows) -> None:
        """Once `windows` are in a checkpoint (this call's or a group's written meanwhile)."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((windows, held))
        async with self.lock:
            group, self.waiting = self.waiting, []
            if group:
                try:
                    await asyncio.to_thread(self.store.commit, *(w for w, _ in group))
                except BaseException as exc:
                    for _, future in group:
                        if future is not held:
                            future.set_exception(exc)
                            future.exception()  # seen: a waiter cancelled meanwhile would leave it unread
                    raise
                for _, future in group:
                    future.set_result(None)
        await held


def _workers() -> ThreadPoolExecutor:
    """The loop's pool for local output, where files are written and large answers decoded: one thread
    a usable core. Both are CPU (Arrow, Parquet, zstd) that holds the GIL between its calls, so threads
    beyond the cores only take turns for it (50 parameters x 7 days on 2 cores, at 0 and 10 ms: 12% less
    CPU and 15% less time than Python's default of 6). Object stores keep that default: their writes
    wait on the network."""
    return ThreadPoolExecutor(max(2, cpus.usable()), thread_name_prefix="etl-work")


def _loop_running() -> bool:
    """Asked outside any except block: a run started while an exception is being handled would give
    every error it raises that exception as its context."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
