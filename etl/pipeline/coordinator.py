"""The run itself: lock, recover, discover, plan, execute, checkpoint.

The coordinator signs in, lists parameters, plans slabs against the checkpoints and writes the
dimension tables; an executor (etl/pipeline/executors.py) runs the slabs, here or on a Dask cluster,
each through etl/pipeline/slab.py's process_slab; the coordinator commits a slab's windows to the
checkpoints only after its result says the files are swapped in, and keeps the run's `RunSummary`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from etl.client import MonitoringClient, purpose
from etl.config import Config
from etl.errors import ConfigError, DataError, EtlError, ExitCode, Interrupted, RunDeadline, error_from
from etl.model import Params, Series, Shard, Windows
from etl.pipeline import dimensions, late
from etl.pipeline.build import Build, Decisions
from etl.pipeline.catalog import catalog_options, forget
from etl.pipeline.dimensions import Rows
from etl.pipeline.discover import discover
from etl.pipeline.executors import Executor, dask_executor, execute, local_executor
from etl.pipeline.group_commit import GroupCommit
from etl.pipeline.identity import check_source_identity
from etl.pipeline.late import Findings, LateOptions
from etl.pipeline.loop import handle_signals, workers
from etl.pipeline.plan import HORIZON_MARGIN_MS, Fleet, History, Plan, PlanOptions, horizon, spans_for
from etl.pipeline.progress import Progress
from etl.pipeline.slab import STOP_GRACE, SlabJob, SlabResult
from etl.pipeline.summary import Backfill, RunSummary, record_id
from etl.state.arrivals import Arrivals
from etl.state.coverage import NONE, Coverage, intervals_of
from etl.state.store import SnapshotNote
from etl.storage import spools
from etl.support import allocator, interrupts
from etl.timeutil import DAY_MS, duration_text, iso, now_ms

if TYPE_CHECKING:  # the lake modules load for lake formats only
    from etl.sinks.lake.committer import Committer, Landed

HORIZON_MARGIN_S = HORIZON_MARGIN_MS // 1000
CAPS_TRUSTED = DAY_MS  # what earlier runs learned of the server's cap is relied on this long
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
    refresh_catalog: bool = False  # list every object's parameters, whatever the catalog says
    # etl verify --repair: per series, (param_id, start, end) fetched and replaced instead of what the
    # checkpoints miss; no late probe, no reference tables
    work: dict[Series, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None


@dataclass
class RunState:
    """Where one run stands, as its stages and its signal handler change it (the coordinator's only
    mutable state besides the summary)."""

    # Set to stop the run gracefully: slabs write what they fetched, nothing new starts.
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    # What ended the run (an error of a slab's that no retry mends, or a signal's), raised at its end.
    fatal: BaseException | None = None
    # Parameters with a window that failed, and the exit code of the first failure.
    failed_params: set[int] = field(default_factory=set)
    failed_code: int | None = None
    # A signal (or Ctrl-C) asked the run to stop.
    interrupted: bool = False
    # retry.run_deadline passed, or a 429 closed the gate until past it (`throttled`).
    out_of_time: bool = False
    throttled: bool = False
    # time.monotonic() when the run must stop; None without a deadline.
    deadline: float | None = None
    # The dimension tables being fetched beside the slabs.
    snapshot: asyncio.Future[None] | None = None
    # The run's own task, cancelled by a stop that comes before slabs run.
    task: asyncio.Task[Any] | None = None
    # Every slab and the dimension tables are done: no deadline stops the run now.
    fetched: bool = False
    # Slabs have started: a signal stops gracefully instead of cancelling.
    executing: bool = False
    # The run took the state lock: it started.
    locked: bool = False
    # Coverage rows (key, start, end) of the slabs committed so far, merged into the checkpoint at the end.
    committed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    # A Dask scheduler's address, or None to run here.
    scheduler: str | None = None
    # Records and dimension tables from the platform that could not be used, one line each.
    left_out: list[str] = field(default_factory=list)


class Coordinator:
    """One run of a config: `run()` does it all and returns its `RunSummary` (kept in `summary` whatever
    the outcome)."""

    def __init__(self, config: Config, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.build = Build(config, options.shard)
        self.data = self.build.data
        self.store = self.build.state_store()
        self.summary = RunSummary(run_id=record_id(), output=self.data.display(), shard=options.shard)
        self.run_state = RunState()

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
            self.summary.checkpoints_past_the_server_clock = keys
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
        self.run_state.task = asyncio.current_task()
        restore = self._handle_signals()
        timer = self._set_deadline(started)
        try:
            if interrupts.pending():  # a Ctrl-C while etl loaded, whose KeyboardInterrupt was lost
                raise Interrupted("interrupted before the run started")
            self.run_state.scheduler = self._scheduler()
            if self.data.local:
                asyncio.get_running_loop().set_default_executor(workers())
            with ExitStack() as held:  # the lock, from the sign-in to the run's end
                await self._run_locked(held)
            if (
                self.run_state.interrupted
            ):  # a signal whose cancellation was absorbed (an await that suppresses it)
                raise Interrupted("interrupted: finished windows are checkpointed; run again to resume")
        except asyncio.CancelledError as exc:
            if not self.run_state.out_of_time or self.run_state.interrupted:
                self.summary.failed(exc)
                raise
            # The deadline passed before any slab ran: nothing was written.
            if (task := asyncio.current_task()) is not None:
                task.uncancel()
            error = RunDeadline(self._deadline_text(), self.run_state.throttled)
            self.summary.failed(error)
            raise error from None
        except BaseException as exc:  # the run's record must not say "ok" whatever stopped it
            self.summary.failed(exc)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            restore()
            self.summary.seconds = time.monotonic() - started
            self.summary.cpu_seconds = time.process_time() - cpu
            if self._recorded():
                self._save_summary()
            self.build.close()
        return self.summary

    def _recorded(self) -> bool:
        """Whether the run leaves a record: once it has taken the lock; refused by the server before, only
        in an output folder that exists (a volume mounted for it, an earlier run's), where etl doctor names
        the cause, never by creating one. A window with nothing in it is refused before anything, as a
        config's mistake: no record."""
        if self.run_state.locked or self.options.dry_run or self.summary.window is None:
            return self.run_state.locked
        with suppress(EtlError, OSError):
            return bool(self.data.fs.isdir(self.data.full("")))
        return False

    def _save_summary(self) -> None:
        try:
            body = orjson.dumps(self.summary.as_dict(), option=orjson.OPT_INDENT_2)
            self.data.write_atomic(f"_runs/{self.summary.run_id}.json", body)
        except EtlError as exc:
            log.warning("could not write the run summary: %s", exc)

    async def _run_locked(self, held: ExitStack) -> None:
        """The run, the state lock entered into `held` once signed in (a dry run takes none)."""
        summary = self.summary
        start, end = self._window()  # a window with nothing in it is refused before any I/O
        summary.window = (start, end)
        findings: Findings | None = None
        now = now_ms()
        async with (
            self.build.client(summary.client) as client,
            self.build.shared(client, not self.options.dry_run),
        ):
            if self.run_state.deadline is not None:
                client.session.gate.ends_at(
                    self.run_state.deadline, lambda: self._out_of_time(throttled=True)
                )
            # Before the output is touched: a refused sign-in or an unreachable host leaves no folder,
            # lock or record that a later command could read as a run.
            await client.sign_in()
            if not self.options.dry_run:
                self.data.check_writable()
                held.enter_context(self.store.lock())
                held.enter_context(spools.held())
                self.run_state.locked = True
                summary.temp_files_removed = self.data.remove_temp_files() + spools.sweep()
            # Under the lock: a state folder that cannot be used is told as the lock's error.
            caps = await asyncio.to_thread(self._caps, client, now)
            coverage = self.store.load()
            recovering = None
            if self.build.lake is not None and not self.options.dry_run:
                # Opening the tables (and importing their library) goes on while the platform answers the
                # listings; planning waits for it.
                recovering = asyncio.ensure_future(asyncio.to_thread(self._recover, coverage))
            try:
                server_now = client.server_now()
                full = self.options.full_refresh or self.options.refresh_catalog
                catalog = catalog_options(self.config, self.store, server_now, full, not self.options.dry_run)
                with purpose.purpose(purpose.CATALOG):
                    found = await discover(client, self.config.select, catalog)
                summary.catalog = found.catalog
            finally:
                if recovering is not None:
                    await recovering
            # After recovery: the checkpoints the lake tables carry are checked against the clock too.
            end = self._up_to_the_server_clock(start, end, server_now, coverage)
            now = horizon(server_now)
            summary.window = (start, end)
            # Quality rows describe the config's window (a backfill's --to does not end a day early), cut
            # at the server's clock too.
            quality_end = min(self.config.window.end_ms(now_ms()), now)
            allocator.trim()
            await asyncio.to_thread(check_source_identity, self.config, coverage, found.params.id)
            # The output is this run's own: the catalog is written anew (a dry run's saves nothing).
            await asyncio.to_thread(found.save_catalog)
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
            decisions = Decisions(buckets, quality_end)
            findings = await self._late(client, coverage, mine, start, end, now, found.silent_params(mine))
            plan = Plan(
                Fleet(mine, buckets),
                coverage,
                PlanOptions(start, end, self.options.full_refresh, self.config.window.overlap),
                self.config.series,
                spans_for(extract.raw_window, extract.aggregate_window),
                by_object="object_id" in self.config.sink.partition_by,
                extra=findings.work if findings is not None else None,
                arrivals=self.store.arrivals,
                full_refresh=self.options.full_refresh,
                waiting=findings.rest if findings is not None else None,
                every=dict(self.config.cadence.series),
                averages=findings.averages if findings is not None else None,
                work=self.options.work,
            )
            summary.planned = plan.summary()
            if self.options.dry_run:
                return
            # Reference tables are fetched and written beside the series: the first windows need not wait.
            snapshot = self.run_state.snapshot = (
                asyncio.ensure_future(
                    self._dimensions(client, found.object_ids, found.objects, found.parameters)
                )
                if self.config.dimensions.enabled and self.options.work is None
                else None
            )
            tails = late.OpenTails.of(findings.work if findings is not None else {}, self.store.arrivals)
            empty = self._empty_windows(findings, mine) if findings is not None else []
            del found, mine  # the plan holds the fleet column-wise: no object per parameter is kept
            try:
                async with self._executor(client, self.run_state.scheduler) as executor:
                    summary.executor = executor.name
                    await self._execute(executor, plan, coverage, decisions, tails)
                if summary.client.gone:
                    await asyncio.to_thread(
                        forget, catalog, self.config.select, summary.catalog, summary.client.gone
                    )
            except BaseException:
                if snapshot is not None:
                    snapshot.cancel()
                raise
            if snapshot is not None:
                if self.run_state.stop.is_set():  # its requests may be as stuck as the windows were
                    snapshot.cancel()
                with suppress(asyncio.CancelledError):
                    await snapshot
            self.run_state.left_out[:0] = client.skipped
            if not self.options.dry_run and self.run_state.fatal is None and client.caps.known() != caps[1]:
                await asyncio.to_thread(self.store.note_caps, caps[0], client.caps.known())
        self.run_state.fetched = True  # what is left to do here writes, and is not cut by the deadline
        if self.run_state.left_out:
            summary.records_left_out += len(self.run_state.left_out)
        stopped = self.run_state.fatal is not None or self.run_state.interrupted or self.run_state.out_of_time
        if empty and not stopped:
            await asyncio.to_thread(self._found_empty, empty)
        if findings is not None and not stopped:
            await asyncio.to_thread(self._keep_prints, findings, end, now)
        if summary.series or findings is not None:
            await asyncio.to_thread(self._compact, coverage, now)
        if summary.backfill.left and self.run_state.fatal is None:  # a failed run leaves only its record
            await asyncio.to_thread(self._note_progress)
        if self.build.lake is not None and not stopped:
            if self.run_state.deadline is not None and time.monotonic() >= self.run_state.deadline:
                log.info("lake upkeep skipped: the run is past retry.run_deadline; the next run does it")
            else:
                from etl.pipeline.maintenance import upkeep  # imports the lake modules: lake formats only

                summary.upkeep = await asyncio.to_thread(upkeep, self.build, end)
        if self.run_state.fatal is not None:
            raise self.run_state.fatal
        if self.run_state.interrupted:
            raise Interrupted("interrupted: finished windows are checkpointed; run again to resume")
        if self.run_state.out_of_time:
            raise RunDeadline(self._deadline_text(), self.run_state.throttled)
        if summary.failed_windows:
            raise error_from(
                f"{len(summary.failed_windows)} window(s) failed (first: {summary.failed_windows[0]}); "
                "the rest is written and checkpointed; the next run retries them",
                self.run_state.failed_code or ExitCode.DATA,
            )
        if self.run_state.left_out:
            raise DataError(
                f"{len(self.run_state.left_out)} record(s) or table(s) the platform sent could not be used and are "
                f"left out (first: {self.run_state.left_out[0]}); the rest is written and checkpointed"
            )

    def _recover(self, coverage: Coverage) -> None:
        # Imported here: the lake modules (pyarrow.dataset, deltalake, pyiceberg) load for lake formats only.
        from etl.sinks.lake.writer import recover

        lake = self.build.lake
        assert lake is not None
        recover([lake.series(s) for s in self.config.series], self.store, coverage, self.build.app)

    @asynccontextmanager
    async def _executor(self, client: MonitoringClient, scheduler: str | None) -> AsyncIterator[Executor]:
        if scheduler is None:
            yield local_executor(client, self.build, self.run_state.stop)
        else:
            wait = self.config.executor.worker_wait / 1000
            async with dask_executor(scheduler, client, self.run_state.stop, wait) as executor:
                yield executor

    async def _dimensions(
        self, client: MonitoringClient, object_ids: list[int], objects: Rows, parameters: Rows
    ) -> None:
        def due() -> tuple[bool, SnapshotNote]:
            stale, fresh = dimensions.due(
                self.store.snapshot(),
                object_ids,
                self.config.sink.format,
                self.config.dimensions.refresh,
                now_ms(),
            )
            return stale or self.options.full_refresh or not self.build.references_written(), fresh

        purpose.set_purpose(purpose.CATALOG)  # this task's own
        fetch, fresh = await asyncio.to_thread(due)
        tables, failed = await dimensions.collect(client, object_ids, objects, parameters, fetch)
        self.run_state.left_out += failed
        self.summary.dimensions = list(tables)
        await asyncio.to_thread(self.build.write_dimensions, tables)
        if fetch and not failed:
            await asyncio.to_thread(self.store.note_snapshot, fresh)

    def _merge_committed(self, coverage: Coverage) -> None:
        if self.run_state.committed:
            coverage.add_arrays(
                *(np.concatenate(column) for column in zip(*self.run_state.committed, strict=True))
            )
            self.run_state.committed = []

    def _compact(self, coverage: Coverage, now: int) -> None:
        """The run's last windows merged into the coverage, then folded into a new base (without the late
        and print rows of days no late point can reach any more)."""
        self._merge_committed(coverage)
        window = self.config.window
        self.store.arrivals.prune(now - max(window.late_max, window.revisions) - DAY_MS)
        self.store.compact(coverage)

    def _caps(self, client: MonitoringClient, now: int) -> tuple[int, dict[str, list[int | None]]]:
        """What earlier runs learned of the server's silent cap, taught to the client when it is less than
        CAPS_TRUSTED old (a server's settings can change: then it is learned again from scratch); when it
        was first learned, and what."""
        at, known = self.store.caps()
        if now - at >= CAPS_TRUSTED:
            return now, {}
        client.caps.learn(known)
        return at, client.caps.known()

    def _note_progress(self) -> None:
        """This run's history left beside the last runs': the backfill's rate and when it ends."""
        backfill = self.summary.backfill
        if not backfill.days_left and not any(run.left_ms for run in self.store.progress()):
            return  # no backfill now or lately: nothing to note, run after run
        self.summary.backfill = Backfill.of(self.store.note_progress(backfill.progress(now_ms())))

    def _empty_windows(self, findings: Findings, mine: Params) -> list[Windows]:
        """The new time of quiet parameters whose probe found nothing in it: asked once, as averages, and
        nothing to write (the late-data tails still read again from their newest points)."""
        found = []
        for series, (pids, starts, ends) in findings.empty.items():
            rows = np.searchsorted(mine.id, pids)
            found.append(Windows(series, pids, mine.object_id[rows], mine.kind[rows], starts, ends))
        return [w for w in found if len(w)]

    def _found_empty(self, empty: list[Windows]) -> None:
        """Checkpoint `empty` once the run fetched everything else: checkpointed before the time with data
        around it, it would move a parameter's checkpoint past a hole that a stopped run leaves."""
        failed = np.array(sorted(self.run_state.failed_params), np.int64)
        for windows in empty:
            windows = windows[~np.isin(windows.param_id, failed)]
            if len(windows):
                self.store.commit(windows)
                self.run_state.committed.append(intervals_of(windows))

    async def _late(
        self,
        client: MonitoringClient,
        coverage: Coverage,
        mine: Params,
        start: int,
        end: int,
        now: int,
        silent: np.ndarray,
    ) -> Findings | None:
        """The tails and revisions to read again and the quiet parameters to poll (etl/pipeline/late.py);
        None when nothing is looked for (or the run reads the windows it was given)."""
        window, cadence = self.config.window, self.config.cadence
        if not (window.late_max or window.revisions or cadence.quiet_max) or self.options.work is not None:
            return None
        arrivals = self.store.arrivals
        if self.options.full_refresh:  # everything is read again: the probes only take the revisions' prints
            coverage, arrivals = Coverage(), Arrivals()
        options = LateOptions(
            start,
            end,
            now,
            window.late_max,
            window.revisions,
            tuple(self.config.series),
            self.config.extract.max_points,
            cadence.quiet_after,
            0 if self.options.full_refresh else cadence.quiet_max,
            () if self.options.full_refresh else tuple(cadence.series.items()),
        )
        with purpose.purpose(purpose.PROBES):
            findings = await late.probe(
                client, coverage, arrivals, mine.id, mine.kind, options, self.summary.counts, silent
            )
        figures = self.summary.late
        figures.quiet, figures.past_late_max, figures.backlog = (
            findings.quiet,
            findings.beyond,
            findings.backlog,
        )
        figures.revised, figures.probes = findings.revised, findings.probes
        if findings.beyond:
            log.info(
                "%d parameter(s) quiet for longer than window.late_max (%s): what they upload for times before "
                "%s is looked for once they send again",
                findings.beyond,
                duration_text(window.late_max / 1000),
                iso(now - window.late_max),
            )
        return findings

    def _keep_prints(self, findings: Findings, end: int, now: int) -> None:
        """The revision prints of the probed calculated parameters, as their averages were when this run
        read their windows; none for a parameter with a failed window (its blocks are compared again next
        run)."""
        window = self.config.window
        if not window.revisions or not findings.buckets:
            return
        ids = np.array(sorted(set(findings.buckets) - self.run_state.failed_params), np.int64)
        series = Series.RAW if Series.RAW in self.config.series else Series.AVERAGE
        newest = {
            int(p): int(t)
            for p, t in zip(ids.tolist(), self.store.arrivals.newest_of(series, ids).tolist(), strict=True)
            if t != NONE
        }
        since = max(self.config.window.start_ms, now - window.revisions)
        block = late.block_of(window.revisions)
        prints = late.new_prints({p: findings.buckets[p] for p in newest}, newest, block, since, end)
        if len(prints):
            update = Arrivals()
            update.add_prints(prints)
            self.store.commit(arrivals=update)

    def _jobs(self, executor: Executor, plan: Plan, decisions: Decisions) -> Iterator[SlabJob]:
        config = self.build.remote_config() if executor.remote else self.config
        for slab in plan.slabs():
            yield SlabJob(config, slab, decisions, self.options.shard)

    async def _execute(
        self, executor: Executor, plan: Plan, coverage: Coverage, decisions: Decisions, tails: late.OpenTails
    ) -> None:
        progress = Progress(plan.windows, self.options.progress)
        commit_lock = asyncio.Lock()
        checkpoints = GroupCommit(self.store)
        # Which (parameter, series) brought new data, for the floor; what history the slabs loaded.
        fresh = {series: np.zeros(len(plan.fleet), bool) for series in plan.series}
        loaded = {series: [0, 0] for series in plan.series}  # windows, parameter-ms

        def fail(_job: SlabJob, exc: BaseException) -> None:
            self.run_state.fatal = self.run_state.fatal or exc
            self.summary.stopped = self.summary.stopped or "error"
            self.run_state.stop.set()

        async def commit(job: SlabJob, result: SlabResult) -> None:
            for failure in result.failures:
                self.summary.failed_windows.append(failure.describe())
                self.run_state.failed_params.add(failure.window.param_id)
                if self.run_state.failed_code is None:
                    self.run_state.failed_code = failure.exit_code
                if failure.fatal and self.run_state.fatal is None:
                    self.run_state.fatal = failure.error or error_from(failure.message, failure.exit_code)
                    self.summary.stopped = self.summary.stopped or "error"
                    self.run_state.stop.set()
            if result.done:  # before its newest points are committed with it
                tails.settle(result.done, result.arrivals)
            written, files = result.written, result.written.files
            if written.staged is not None and committer is not None:
                # Lake tables: the committer commits the slab with its group, then checkpoints them; the
                # slab's files are the data files that commit added.
                files = (await committer.submit(written.staged, result.arrivals)).files
            # Checkpoint what was written even if some windows failed: failed ones stay open.
            if result.done:
                if written.staged is None:
                    await checkpoints.commit(result.done, result.arrivals)
                late_rows = result.arrivals.late
                if len(late_rows):
                    self.summary.late.points += int(late_rows.values[0].sum())
                    self.summary.late.longest_ms = max(
                        self.summary.late.longest_ms, int(late_rows.values[1].max())
                    )
                async with commit_lock:
                    # Merged into the coverage a few hundred thousand at a time, not per slab: each merge
                    # copies the whole coverage while other slabs hold their data.
                    self.run_state.committed.append(intervals_of(result.done))
                    if sum(len(rows[0]) for rows in self.run_state.committed) >= MERGE_AFTER:
                        await asyncio.to_thread(self._merge_committed, coverage)
                # A slab's freed buffers go back to the OS, not to the next one's peak; malloc_trim walks
                # every arena, so not on the event loop.
                await asyncio.to_thread(allocator.trim)
                fresh[result.series][np.searchsorted(plan.fleet.ids, result.new_data)] = True
                loaded[result.series][0] += result.history_windows
                loaded[result.series][1] += result.history_ms
                totals = self.summary.series[result.series]
                totals.slabs += 1
                totals.windows += len(result.done)
                totals.points += written.points
                totals.files.update(files)
                self.summary.add_quality(written.quality_rows, written.lowest_completeness)
            self.summary.counts.add(result.counts)
            if result.client is not None:
                self.summary.client.add(result.client)
            progress.advance(len(result.done or ()), written.points, len(result.failures))

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
                self.config.source.name,
                (self.build.app, self.summary.run_id),
                self.config.sink.commit,
                landed,
            )
            for series, planned in plan.summary().items():
                committer.expect(series, planned["slabs"])
        self.run_state.executing = True
        try:
            await execute(
                executor,
                self._jobs(executor, plan, decisions),
                commit,
                fail,
                self.run_state.stop,
                committer.drain if committer is not None else None,
            )
        finally:
            if committer is not None:
                committer.discard()
            summary = self.summary
            done = sum(totals.windows for totals in summary.series.values())
            gone = summary.counts.gone
            summary.windows_not_done = max(0, plan.windows - done - len(summary.failed_windows) - gone)
            summary.request_floor = sum(int(f.sum()) for f in fresh.values()) + 2  # + sign-in, objects
            # Late tails re-read behind the frontier count as loaded history too: never below none left.
            summary.backfill.left = {
                series.value: History(
                    max(0, h.windows - loaded[series][0]), max(0, h.ms - loaded[series][1]), h.total_ms
                )
                for series, h in plan.history.items()
            }
            progress.close(summary.windows_not_done, summary.stopped)

    def _set_deadline(self, started: float) -> asyncio.TimerHandle | None:
        """`retry.run_deadline` from the run's start: then the run stops (`_out_of_time`)."""
        seconds = self.config.retry.run_deadline
        if seconds is None or self.options.dry_run:
            return None
        self.run_state.deadline = started + seconds
        return asyncio.get_running_loop().call_later(
            self.run_state.deadline - time.monotonic(), self._out_of_time
        )

    def _out_of_time(self, throttled: bool = False) -> None:
        """The deadline passed, or (`throttled`) a 429 holds every request until past it: the run stops as
        on SIGTERM (slabs write what they fetched; windows still out after STOP_GRACE stay open), or is
        cancelled if no slab has started."""
        if self.run_state.out_of_time or self.run_state.interrupted or self.run_state.fetched:
            return
        self.run_state.out_of_time, self.run_state.throttled = True, throttled
        self.summary.stopped = "throttled" if throttled else "run_deadline"
        if not self.run_state.executing:
            if (task := self.run_state.task) is not None:
                task.cancel()
            return
        log.warning(
            "%s: stopping after the windows in flight (those still out in %gs are cancelled and stay open)",
            self._deadline_reason(),
            STOP_GRACE,
        )
        self.run_state.stop.set()
        if self.run_state.snapshot is not None:  # the dimension tables wait on the same server
            self.run_state.snapshot.cancel()

    def _deadline_reason(self) -> str:
        seconds = f"retry.run_deadline, {self.config.retry.run_deadline:g}s"
        if self.run_state.throttled:
            return f"a 429 holds every request until past the run's deadline ({seconds})"
        return f"the run reached its deadline ({seconds})"

    def _deadline_text(self) -> str:
        """The run's one line when it stopped at its deadline: why, and what it left undone."""
        summary = self.summary
        if not self.run_state.executing:
            return (
                f"{self._deadline_reason()}: stopped before any window was fetched; the next run starts again"
            )
        undone = [f"{summary.windows_not_done} window(s) not fetched"] if summary.windows_not_done else []
        if summary.failed_windows:
            undone.append(f"{len(summary.failed_windows)} failed (first: {summary.failed_windows[0]})")
        done = any(totals.windows for totals in summary.series.values())
        return (
            f"{self._deadline_reason()}: stopped; {' and '.join(undone) or 'no window'} left open for the "
            "next run; " + ("the rest is written and checkpointed" if done else "nothing was written")
        )

    def _handle_signals(self) -> Callable[[], None]:
        """SIGINT and SIGTERM for the whole run: while slabs run, a graceful stop; before, the run is
        cancelled. Returns what puts the previous handlers back."""
        task = asyncio.current_task()

        def on_signal(signum: int) -> None:
            if not self.run_state.executing:
                self.run_state.interrupted = True
                if task is not None:
                    task.cancel()
                return
            if not self.run_state.interrupted:
                log.warning(
                    "%s received: stopping after the windows in flight (those still out in %gs are "
                    "cancelled and stay open)",
                    signal.Signals(signum).name,
                    STOP_GRACE,
                )
                self.summary.stopped = self.summary.stopped or "signal"
            self.run_state.interrupted = True
            self.run_state.stop.set()

        return handle_signals(on_signal)
