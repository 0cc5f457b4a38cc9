"""A run: discover, plan, fetch slabs with bounded concurrency, write them, then checkpoint them."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
import orjson

from etl import dimensions
from etl.client import ClientStats, MonitoringClient, RetryPolicy
from etl.client.models import ObjectFull, Parameter
from etl.config import Config
from etl.errors import ApiError, DataError, EtlError, Interrupted
from etl.extract import fetch_unit
from etl.plan import PlanOptions, Slab, describe, plan
from etl.progress import Progress
from etl.sinks import DatasetWriter, Replaced, file_format
from etl.state import State, StateStore
from etl.storage import Storage
from etl.timeutil import iso, now_ms
from etl.transform import UnitData, to_table
from etl.walk import discover

log = logging.getLogger("etl")


@dataclass(frozen=True)
class RunOptions:
    start: int | None = None  # backfill bounds; default: the config's window
    end: int | None = None
    full_refresh: bool = False
    shard: tuple[int, int] | None = None
    progress: bool | None = None  # None: a bar when stderr is a terminal
    dry_run: bool = False  # plan only


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

    def as_dict(self) -> dict:
        counters = dict(self.warnings)
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "started": datetime.fromtimestamp(self.started, tz=UTC).isoformat(timespec="seconds"),
            "seconds": round(self.seconds, 3),
            "window": {"start": iso(self.window[0]), "end": iso(self.window[1])} if self.window else None,
            "output": self.output,
            "objects": self.objects,
            "parameters": self.parameters,
            "planned": self.planned,
            "series": {
                name: {"slabs": t.slabs, "windows": t.windows, "points": t.points, "files": len(t.files)}
                for name, t in sorted(self.series.items())
            },
            "points": sum(t.points for t in self.series.values()),
            **self.client.as_dict(),
            "splits": counters.pop("splits", 0),
            "warnings": {k: v for k, v in sorted(counters.items()) if k != "requests"},
            "failed_windows": self.failed_windows[:50],
            "failed_window_count": len(self.failed_windows),
            "temp_files_removed": self.temp_files_removed,
        }


def make_client(config: Config, stats: ClientStats | None = None) -> MonitoringClient:
    source = config.source
    verify: bool | str = str(source.ca_bundle) if source.ca_bundle else source.verify_tls
    if verify is False:
        log.warning("TLS certificate verification is OFF (source.verify_tls: false)")
    return MonitoringClient(
        source.base_url,
        source.username,
        source.resolve_password(),
        timeout=httpx.Timeout(source.read_timeout, connect=source.connect_timeout),
        retry=RetryPolicy(**config.retry.model_dump()),
        max_in_flight=config.extract.concurrency,
        verify=verify,
        stats=stats,
    )


def _is_fatal(exc: BaseException) -> bool:
    """Errors after which fetching more is pointless (server down, credentials gone, a bug)."""
    if isinstance(exc, DataError):
        return False
    if isinstance(exc, ApiError):
        return getattr(exc, "exit_code", 0) != DataError.exit_code
    return True


class Runner:
    def __init__(self, config: Config, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.data = Storage(config.sink.path, config.sink.storage_options)
        self.store = StateStore(Storage(config.state_path, config.sink.storage_options))
        self.fmt = file_format(config.sink.format, config.sink.compression)
        label = f"s{options.shard[0]}of{options.shard[1]}" if options.shard else "0"
        self.writers = {
            s: DatasetWriter(self.data, s, self.fmt, list(config.sink.partition_by), label) for s in config.series
        }
        run_id = datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
        self.summary = RunSummary(run_id=run_id, output=self.data.display())
        self.stop = asyncio.Event()
        self.fatal: BaseException | None = None
        self.interrupted = False

    def _window(self) -> tuple[int, int]:
        window = self.config.window
        start = self.options.start if self.options.start is not None else window.start_ms
        end = self.options.end if self.options.end is not None else window.end_ms(now_ms())
        if start >= end:
            raise EtlError(f"nothing to do: window start {iso(start)} is not before its end {iso(end)}")
        return start, end

    async def run(self) -> RunSummary:
        started = time.monotonic()
        try:
            if not self.options.dry_run:
                self.data.check_writable()
                with self.store.lock():
                    await self._run_locked()
            else:
                await self._run_locked()
        except EtlError as exc:
            self.summary.status = "interrupted" if isinstance(exc, Interrupted) else "failed"
            self.summary.error = str(exc)
            raise
        finally:
            self.summary.seconds = time.monotonic() - started
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
        if not self.options.dry_run:
            summary.temp_files_removed = self.data.remove_temp_files()
        state = self.store.load()
        start, end = self._window()
        summary.window = (start, end)
        async with make_client(self.config, summary.client) as client:
            await client.sign_in()
            objects, params = await discover(client, self.config.select, self.options.shard)
            summary.objects, summary.parameters = len(objects), len(params)
            slabs = plan(self.config, params, state, PlanOptions(start, end, self.options.full_refresh))
            summary.planned = describe(slabs)
            if self.options.dry_run:
                return
            # Reference tables are fetched and written beside the series: the first windows need not wait.
            snapshot = asyncio.ensure_future(self._dimensions(client, objects, params)) if self.config.dimensions else None
            await self._execute(client, slabs, state)
            if snapshot is not None:
                await snapshot
        if self.fatal is not None:
            raise self.fatal
        if self.interrupted:
            raise Interrupted("interrupted: finished windows are checkpointed; run again to resume")
        if summary.failed_windows:
            raise DataError(
                f"{len(summary.failed_windows)} window(s) failed (first: {summary.failed_windows[0]}); "
                "the rest is written and checkpointed; the next run retries them"
            )

    async def _dimensions(self, client: MonitoringClient, objects: list[ObjectFull], params: list[Parameter]) -> None:
        tables = await dimensions.collect(client, objects, params)
        await asyncio.to_thread(dimensions.write, self.data, self.fmt, tables)

    async def _execute(self, client: MonitoringClient, slabs: list[Slab], state: State) -> None:
        progress = Progress(sum(len(s.units) for s in slabs), self.options.progress)
        admit = asyncio.Semaphore(self.config.extract.slabs_in_flight)
        commit_lock = asyncio.Lock()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if not self.interrupted:
                log.warning("%s received: stopping after the windows in flight", signal.Signals(signum).name)
            self.interrupted = True
            self.stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)

        async def one(slab: Slab) -> None:
            async with admit:
                if self.stop.is_set():
                    return
                try:
                    await self._slab(client, slab, state, commit_lock, progress)
                except Exception as exc:  # a write that failed (disk full...) or a bug: stop admitting work
                    self.fatal = self.fatal or exc
                    self.stop.set()

        try:
            await asyncio.gather(*(one(s) for s in slabs))
        finally:
            progress.close()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    async def _slab(self, client, slab: Slab, state: State, commit_lock: asyncio.Lock, progress: Progress) -> None:
        max_points = self.config.extract.max_points
        counters: Counter = Counter()
        results = await asyncio.gather(
            *(fetch_unit(client, u, max_points, counters) for u in slab.units), return_exceptions=True
        )
        good: list[UnitData] = []
        for unit, result in zip(slab.units, results, strict=True):
            if isinstance(result, UnitData):
                good.append(result)
                continue
            if not isinstance(result, Exception):
                raise result  # CancelledError and friends
            self.summary.failed_windows.append(
                f"param {unit.param.id} {unit.series} {iso(unit.start)}..{iso(unit.end)}: {result}"
            )
            if _is_fatal(result) and self.fatal is None:
                self.fatal = result
                self.stop.set()
        # Write and checkpoint what succeeded even if some windows failed: failed ones stay open.
        if good:
            writer = self.writers[slab.series]
            table = await asyncio.to_thread(to_table, slab.series, good)
            ranges = [Replaced(g.unit.param.id, g.unit.param.object_id, g.unit.start, g.unit.end) for g in good]
            written = await asyncio.to_thread(writer.write, table, ranges)
            async with commit_lock:
                for g in good:
                    state.add(g.unit.param.id, slab.series, g.unit.start, g.unit.end)
                await asyncio.to_thread(self.store.save, state)
            totals = self.summary.series[slab.series]
            totals.slabs += 1
            totals.windows += len(good)
            totals.points += table.num_rows
            totals.files.update(written.files)
        self.summary.warnings.update(counters)
        progress.advance(len(slab.units), sum(len(g) for g in good))


def run(config: Config, options: RunOptions | None = None) -> RunSummary:
    return asyncio.run(Runner(config, options or RunOptions()).run())
