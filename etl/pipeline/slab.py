"""One slab, from requests to durable files: the unit every executor runs.

A slab's windows are fetched in write order with at most `2 x extract.batch_windows` windows fetched
ahead of the writer, and handed to it a batch (whole parameters, about `batch_windows` windows) at a
time, so a slab holds a bounded amount of data however wide the fleet. Requests keep flowing across
batch boundaries; writing runs in a thread beside the fetching.

A window that fails stays out of the files and the checkpoints; a fatal failure (or a stop) ends the
slab early, writing what was fetched before it. A window whose parameter is gone (its series answered
404) is no failure: it is counted (`Counts.gone`) and left open, and the run names the parameter. After
a stop (a signal) the windows in flight get `STOP_GRACE` seconds; those still out then (a stuck answer)
are cancelled and stay open. No checkpoint is committed here: the coordinator does, once the result says
the files are swapped in. Besides the client, a job and its result are plain picklable data, so
`run_slab` can run it on a Dask worker with a client of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa

from etl.client import ClientStats, MonitoringClient, purpose
from etl.client.budget import Member, keep_in_touch
from etl.config import Config
from etl.errors import EtlError, ExitCode, ParameterGone, without_frames
from etl.model import Series, Shard, Window, Windows, batches
from etl.pipeline.build import Build, Decisions
from etl.pipeline.clean import WindowData, clean, to_table
from etl.pipeline.cluster import TaskLink
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import fetch_window
from etl.pipeline.plan import Slab
from etl.sinks.base import SlabOutcome, SlabSink
from etl.state.arrivals import Arrivals
from etl.state.coverage import NONE, key_of
from etl.support import allocator, redact
from etl.timeutil import iso


@dataclass(frozen=True)
class SlabJob:
    config: Config
    slab: Slab
    decisions: Decisions
    shard: Shard | None = None
    budget: str | None = (
        None  # on Dask: the run's budget (etl/pipeline/cluster.py) the task's client is a member of
    )

    def __repr__(self) -> str:  # Dask prints task arguments when a task fails: no config in there
        slab = self.slab
        return f"SlabJob({slab.series} from {iso(slab.start)}, bucket {slab.bucket}, {len(slab.windows)} windows)"


@dataclass(frozen=True)
class WindowFailure:
    window: Window
    message: str
    exit_code: int
    fatal: bool
    error: BaseException | None = field(default=None, compare=False)  # the original, in-process only

    def describe(self) -> str:
        return f"{self.window.describe()}: {self.message}"


@dataclass
class SlabResult:
    series: Series
    done: Windows | None = None  # fetched and in the files now
    failures: list[WindowFailure] = field(default_factory=list)
    windows: int = 0  # planned
    # What the sink made of the windows done: points, files, quality figures, a lake slab's staged rows.
    written: SlabOutcome = field(default_factory=SlabOutcome)
    # The newest row of each parameter's windows done, and (raw) the points that came late.
    arrivals: Arrivals = field(default_factory=Arrivals)
    counts: Counts = field(default_factory=Counts)
    client: ClientStats | None = None  # the counts of a task's own client (run_slab)
    # Of the windows done: the parameters whose fresh windows (not history) brought rows, and the
    # history windows and their parameter-time (a backfill's progress).
    new_data: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    history_windows: int = 0
    history_ms: int = 0

    def detached(self) -> SlabResult:
        """Without exception objects: many cannot be unpickled in another process."""
        return dataclasses.replace(self, failures=[dataclasses.replace(f, error=None) for f in self.failures])


STOP_GRACE = 2.0  # seconds the windows in flight get after a stop before they are cancelled


class FetchFlow(Protocol):
    """What the executor hears of a slab's windows as they go (on the event loop), to admit the next slab
    before this one's requests run dry rather than after its files are written."""

    def launched(self) -> None: ...  # a window's fetch started (it waits for a request slot, or has one)

    def fetched(self) -> None: ...  # that fetch ended, with data or an error

    def released(self, count: int) -> None: ...  # the writer is done with this many windows


class _Fetcher:
    """Fetches a slab's windows in order, at most `ahead` of them before the writer takes them."""

    def __init__(
        self,
        client: MonitoringClient,
        windows: Windows,
        max_points: int,
        ahead: int,
        counts: Counts,
        flow: FetchFlow | None = None,
        history: np.ndarray | None = None,
        answered: dict[int, WindowData] | None = None,
    ) -> None:
        self.client, self.windows, self.max_points, self.counts = client, windows, max_points, counts
        self.history = history if history is not None else np.zeros(len(windows), bool)
        self.answered = answered or {}
        self.flow = flow
        self.room = asyncio.Semaphore(ahead)
        self.stopped = False
        self.cancelled = False  # windows still in flight were cancelled (a stop's grace ran out)
        self.tasks: list[asyncio.Task[WindowData] | None] = []
        self.launched = asyncio.Event()  # set whenever a task is added, and at the end
        self.done_launching = False

    def halt(self) -> None:
        """Launch nothing more (what is in flight finishes)."""
        self.stopped = True
        self.launched.set()

    def cancel(self) -> None:
        """Cancel the windows still in flight: they stay open."""
        self.cancelled = True
        for task in self.tasks:
            if task is not None and not task.done():
                task.cancel()

    async def _one(self, window: Window, history: bool) -> WindowData:
        if (answer := self.answered.get(window.param_id)) is not None and answer.covers(window):
            return answer.within(window)
        purpose.set_purpose(purpose.HISTORY if history else purpose.NEW_DATA)  # this task's own
        return clean(
            window, await fetch_window(self.client, window, self.max_points, self.counts), self.counts
        )

    async def launch(self) -> None:
        try:
            for window, history in zip(self.windows, self.history.tolist(), strict=True):
                await self.room.acquire()
                if self.stopped:
                    break
                task = asyncio.ensure_future(self._one(window, history))
                if self.flow is not None:
                    self.flow.launched()
                    task.add_done_callback(self._fetched)
                self.tasks.append(task)
                self.launched.set()
        finally:
            self.done_launching = True
            self.launched.set()

    async def task(self, index: int) -> asyncio.Task[WindowData] | None:
        """The index-th window's task, once launched; None if it never will be."""
        while index >= len(self.tasks):
            if self.done_launching or self.stopped:
                return None
            self.launched.clear()
            await self.launched.wait()
        return self.tasks[index]

    def _fetched(self, _task: asyncio.Task[WindowData]) -> None:
        if self.flow is not None:
            self.flow.fetched()

    def release(self, count: int) -> None:
        for _ in range(count):
            self.room.release()
        if self.flow is not None:
            self.flow.released(count)


async def process_slab(
    job: SlabJob,
    client: MonitoringClient,
    writer: SlabSink,
    stop: asyncio.Event | None = None,
    flow: FetchFlow | None = None,
) -> SlabResult:
    """Fetch the slab's windows and write those that succeed; failed ones stay open. `flow` hears of
    each window's fetch and release (the local executor's admission)."""
    slab, extract = job.slab, job.config.extract
    result = SlabResult(slab.series, windows=len(slab.windows))
    groups = batches(slab.windows.param_id, extract.batch_windows)
    # Room for the batch being written and the next: never less than two of the longest batch.
    ahead = 2 * max([extract.batch_windows, *(hi - lo for lo, hi in groups)])
    fetcher = _Fetcher(
        client, slab.windows, extract.max_points, ahead, result.counts, flow, slab.history, slab.averages
    )
    watch = asyncio.ensure_future(_relay(stop, fetcher)) if stop is not None else None
    launcher = asyncio.ensure_future(fetcher.launch())
    source, by_object = job.config.source.name, writer.layout.by_object
    done = np.zeros(len(slab.windows), bool)  # by position in slab.windows (not a list of ints, which
    # would leave a slab's worth of small objects across the allocator's arenas)
    newest = np.full(len(slab.windows), NONE, np.int64)  # each window's newest row
    try:
        for lo, hi in groups:
            good: list[WindowData] = []
            written: list[int] = []
            complete = True
            for index in range(lo, hi):
                task = await fetcher.task(index)
                if task is None:
                    complete = False
                    break
                outcome = (await asyncio.gather(task, return_exceptions=True))[0]
                fetcher.tasks[index] = None  # a finished task holds its window's data: let it go
                if isinstance(outcome, WindowData):
                    good.append(outcome)
                    written.append(index)
                    if len(outcome.ts):
                        newest[index] = outcome.ts[-1]
                elif isinstance(outcome, asyncio.CancelledError) and fetcher.cancelled:
                    complete = False  # stopped while in flight: it stays open; the rest is written
                elif isinstance(outcome, ParameterGone):
                    result.counts.gone += 1  # not a failure: the run takes it out of the catalog
                elif isinstance(outcome, Exception):
                    # Each error class says whether fetching more is pointless; anything else is a bug. The
                    # run's record keeps the message, which may quote a server's answer.
                    failure = WindowFailure(
                        slab.windows[index],
                        redact.redact(str(outcome)),
                        outcome.exit_code if isinstance(outcome, EtlError) else ExitCode.INTERNAL,
                        outcome.fatal if isinstance(outcome, EtlError) else True,
                        # The error, not the data its frames hold; a bug keeps its traceback (it stops the run).
                        without_frames(outcome) if isinstance(outcome, EtlError) else outcome,
                    )
                    result.failures.append(failure)
                    if failure.fatal:
                        fetcher.halt()  # fetch no more; what is fetched is still written
                else:
                    raise outcome  # CancelledError and friends
            if good:
                table = await asyncio.to_thread(to_table, slab.series, good, source, by_object)
                await asyncio.to_thread(_write, writer, table, slab.windows[np.array(written, np.int64)])
                done[written] = True
            fetcher.release(hi - lo)
            if not complete:
                break
        result.written = await asyncio.to_thread(writer.finish)
        result.done = slab.windows[done]
        received = done & (newest != NONE)
        history = slab.history if slab.history is not None else np.zeros(len(slab.windows), bool)
        result.new_data = np.unique(slab.windows.param_id[received & ~history])
        result.history_windows = int((done & history).sum())
        result.history_ms = int((slab.windows.end - slab.windows.start)[done & history].sum())
        result.arrivals.add_newest(key_of(slab.windows.param_id[received], slab.series), newest[received])
        if result.written.late is not None:
            result.arrivals.add_late(result.written.late)
    except BaseException:
        fetcher.halt()
        await asyncio.to_thread(writer.abort)
        result.done = None
        raise
    finally:
        launcher.cancel()
        for task in fetcher.tasks:
            if task is not None:
                task.cancel()
        if watch is not None:
            watch.cancel()
    return result


TRIM_EVERY = 0.5  # seconds


def _write(writer: SlabSink, table: pa.Table, windows: Windows) -> None:
    writer.write(table, windows)
    # A slab of a wide fleet runs for minutes: its freed buffers go back to the OS as it goes, not only
    # when it ends (the heap's free pages would otherwise add up to a fleet-proportional share of RSS).
    allocator.trim(every=TRIM_EVERY)


async def _relay(stop: asyncio.Event, fetcher: _Fetcher) -> None:
    await stop.wait()
    fetcher.halt()
    await asyncio.sleep(STOP_GRACE)
    fetcher.cancel()


def run_slab(job: SlabJob, key: str = "slab") -> SlabResult:
    """The Dask task `key`: process_slab with a client and writer of its own (one sign-in per slab), whose
    requests are admitted by the run's budget, and which stops when the run does."""
    built = Build(job.config, job.shard)
    link = TaskLink(job.budget, key) if job.budget is not None else None
    member = Member(link.member if link is not None else key)

    async def go() -> SlabResult:
        stats = ClientStats()
        stop = asyncio.Event()
        touch: asyncio.Future[None] | None = None
        async with built.client(stats) as client:
            if link is not None:
                client.session.limit = member
                stats.capacity = member.figures  # the budget's limit counts this task's answers
                touch = asyncio.ensure_future(
                    keep_in_touch(member, client.session, link.exchange, stop, every=0)
                )
            try:
                writer = built.slab_writer(job.slab, job.decisions, remote=True)
                result = await process_slab(job, client, writer, stop)
            finally:
                if touch is not None:
                    touch.cancel()
        result.client = stats
        return result.detached()

    try:
        return asyncio.run(go())
    finally:
        built.close()  # a worker runs many slabs: none keeps a database connection
        if link is not None:
            link.close(member.report(0, 0, done=True))  # its last answers, and its permits back
