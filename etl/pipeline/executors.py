"""Where slabs run: in this process (one shared client, as always) or on a dask.distributed cluster.

Both executors take slabs from the plan as they go (the plan makes them lazily), a bounded number at
a time, in plan order, and hand each result to the coordinator's `commit` as soon as it arrives; the
coordinator checkpoints it. A slab leaves the admission count when it has run, before its commit: a
lake slab's commit waits for its group (etl/sinks/lake/committer.py), which `drain` commits once no
slab is left to run. A stop (a signal, a fatal error) admits no more slabs; those in flight write what
they fetched and are committed, on the cluster too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

from etl.client import MonitoringClient
from etl.client.budget import Budget, Grant, Member, Report, keep_in_touch
from etl.client.concurrency import LearnedLimit
from etl.errors import EtlError, NetworkError
from etl.pipeline.build import Build
from etl.pipeline.cluster import Serving, key_of
from etl.pipeline.slab import STOP_GRACE, FetchFlow, SlabJob, SlabResult, process_slab, run_slab
from etl.support import trace
from etl.support.optional import require
from etl.timeutil import iso

log = logging.getLogger("etl")

RunJob = Callable[[SlabJob, FetchFlow], Awaitable[SlabResult]]
Commit = Callable[[SlabJob, SlabResult], Awaitable[None]]
Fail = Callable[[SlabJob, BaseException], None]
Drain = Callable[[], Awaitable[None]]


MAX_SLABS = 32  # slabs in flight at most, however small (each holds a few open files)
STOP_WRITE = 3.0  # seconds a slab on the cluster has after a stop, past STOP_GRACE, to write what it fetched
WATCH_EVERY = 1.0  # seconds between two counts of the cluster's workers


@dataclass(frozen=True)
class Executor:
    name: str
    in_flight: int  # slabs admitted at once, whatever their size
    run_job: RunJob
    remote: bool = False  # jobs run in other processes, maybe on other machines
    # More slabs are admitted while fewer than twice the requests that may fly now (`slots()`: the
    # client's limit, which moves when it is learned) of the admitted windows wait for or hold a request
    # slot, and fewer than four times as many (`hold_min` at least) are fetched (or being fetched) and
    # not yet written. 0 slots: no more.
    slots: Callable[[], int] = lambda: 0
    hold_min: int = 0
    ahead: int = 0  # windows a slab fetches ahead of its writer at most (what admitting it reserves)


class _Admission:
    """Slabs in flight: at least `in_flight` of them, and more whenever the admitted slabs' windows run
    short of requests to send, so that as many requests as the client's limit allows stay in flight
    whatever a slab's size. A slab counts by what it still has to fetch, not by its size: one whose windows are all
    fetched (writing its files, committing its checkpoint) makes room for the next at once. `hold`
    bounds the windows fetched and not yet written (memory), `MAX_SLABS` the open files."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.slabs = 0
        self.queued = 0  # windows launched (or reserved) and not yet fetched
        self.held = 0  # windows launched (or reserved) and not yet released by their writer
        self.changed = asyncio.Event()

    def _room(self) -> bool:
        e = self.executor
        if self.slabs < e.in_flight:
            return True
        slots = e.slots()
        return self.slabs < MAX_SLABS and self.queued < 2 * slots and self.held < max(4 * slots, e.hold_min)

    async def enter(self, size: int) -> _Flow:
        while not self._room():
            self.changed.clear()
            await self.changed.wait()
        self.slabs += 1
        return _Flow(self, min(size, self.executor.ahead))

    def leave(self, flow: _Flow) -> None:
        self.slabs -= 1
        flow.close()
        self.changed.set()

    async def idle(self) -> None:
        """Until every admitted slab has run."""
        while self.slabs:
            self.changed.clear()
            await self.changed.wait()


class _Flow:
    """One admitted slab's share of the admission's tallies (`FetchFlow`). Admitting it reserves the
    windows it will launch first, so that slabs admitted back to back see each other's demand."""

    def __init__(self, admission: _Admission, reserved: int) -> None:
        self.admission, self.reserved = admission, reserved
        self.queued = self.held = 0
        self.closed = False
        admission.queued += reserved
        admission.held += reserved

    def launched(self) -> None:
        if self.closed:
            return
        if self.reserved:
            self.reserved -= 1
        else:
            self.admission.queued += 1
            self.admission.held += 1
        self.queued += 1
        self.held += 1

    def fetched(self) -> None:
        if self.closed:  # a cancelled fetch's callback runs after its slab ended
            return
        self.queued -= 1
        self.admission.queued -= 1
        self.admission.changed.set()

    def released(self, count: int) -> None:
        if self.closed:
            return
        self.held -= count
        self.admission.held -= count
        self.admission.changed.set()

    def close(self) -> None:
        """The slab is done: what it still counted (cancelled fetches, unused reservations) goes."""
        self.admission.queued -= self.queued + self.reserved
        self.admission.held -= self.held + self.reserved
        self.queued = self.held = self.reserved = 0
        self.closed = True


async def execute(
    executor: Executor,
    jobs: Iterator[SlabJob],
    commit: Commit,
    fail: Fail,
    stop: asyncio.Event,
    drain: Drain | None = None,
) -> None:
    admission = _Admission(executor)

    traced = trace.current()

    async def one(job: SlabJob, flow: _Flow) -> None:
        slab = job.slab
        try:
            with traced.span(
                "etl.slab", series=str(slab.series), day=iso(slab.start)[:10], windows=len(slab.windows)
            ) as span:
                result = await executor.run_job(job, flow)
                span.set(
                    points=result.written.points,
                    windows_done=len(result.done) if result.done is not None else 0,
                    windows_failed=len(result.failures),
                    **({"requests": result.client.requests} if result.client is not None else {}),
                )
        except Exception as exc:  # a write that failed (disk full...), a lost cluster, or a bug
            fail(job, exc)
            return
        finally:
            admission.leave(flow)
        try:
            with traced.span("etl.commit", series=str(slab.series), points=result.written.points):
                await commit(job, result)
        except Exception as exc:  # a commit that failed
            fail(job, exc)

    running: set[asyncio.Task[None]] = set()
    try:
        for job in jobs:
            flow = await admission.enter(len(job.slab.windows))
            if stop.is_set():
                admission.leave(flow)  # admitted, never run
                break
            task = asyncio.ensure_future(one(job, flow))
            running.add(task)
            task.add_done_callback(running.discard)
        if drain is not None:  # every slab has run: what waits for a group can be committed now
            await admission.idle()
            await drain()
        if running:
            await asyncio.gather(*running)
    except BaseException:
        for task in running:
            task.cancel()
        raise


def local_executor(client: MonitoringClient, build: Build, stop: asyncio.Event) -> Executor:
    """Slabs share the run's client: one sign-in, one pool, one limit on the requests in flight."""
    extract = build.config.extract
    limit = client.session.limit
    return Executor(
        "local",
        extract.slabs_in_flight,
        lambda job, flow: process_slab(job, client, build.slab_writer(job.slab, job.decisions), stop, flow),
        # Twice the request slots waiting: a slab's last answers and the next one's first overlap. The
        # data held is what two slabs of a wide fleet hold anyway (each fetches 2 batches ahead).
        slots=lambda: limit.current,
        hold_min=2 * extract.batch_windows,
        ahead=2 * extract.batch_windows,
    )


async def _result_of(future: Any) -> SlabResult:
    result: SlabResult = await future
    return result


@dataclass
class _Remote:
    """A slab submitted to the cluster; `dropped` resolves when the run stops waiting for it (None: a
    stop; an exception: the cluster is lost)."""

    key: str
    future: Any
    dropped: asyncio.Future[None]


@asynccontextmanager
async def dask_executor(
    address: str,
    client: MonitoringClient,
    stop: asyncio.Event,
    worker_wait: float,
    connect_timeout: float = 30.0,
) -> AsyncIterator[Executor]:
    """Each slab is one task (run_slab: its own client, its own files); a task of a lost worker is
    rescheduled by Dask and redone from scratch, which rewrites the same files. The source's limit is the
    run's budget (etl/pipeline/cluster.py): every task's client is a member, and so is `client` (the
    coordinator's) while slabs run. A stop reaches the tasks with their permits: each writes what it
    fetched (windows still out after STOP_GRACE stay open) and returns; slabs not started yet, and those
    still out `STOP_WRITE` seconds after that grace, are cancelled, their windows left open. A cluster
    without a worker for `worker_wait` seconds ends the run (NetworkError: exit 4)."""
    require("distributed", "the dask executor")
    from distributed import Client
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    try:
        dask = await Client(address, asynchronous=True, timeout=connect_timeout)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NetworkError(f"cannot reach the Dask scheduler at {address}: {reason}") from None
    run = uuid.uuid4().hex[:8]
    name = f"etl-budget-{run}"
    session = client.session
    limit = session.limit
    # The cluster's traffic starts here: its limit is learned from where one process's starts, as if from
    # its first request. What the coordinator's own few requests taught it says nothing of a cluster's.
    budget = Budget(
        LearnedLimit(limit.maximum, session.options.start_in_flight, limit.figures)
        if isinstance(limit, LearnedLimit)
        else limit
    )
    own = Member(f"coordinator-{run}")
    remotes: dict[str, _Remote] = {}

    def no_workers() -> NetworkError:
        return NetworkError(
            f"the Dask cluster at {address} has had no worker for {worker_wait:g}s (executor.worker_wait): "
            "start workers, or check that they reach the scheduler"
        )

    async def threads() -> int:
        return sum((await dask.nthreads()).values())

    async def watch() -> None:
        """Workers that all left, and a stop: slabs not started are dropped at once, the others after
        their grace and STOP_WRITE."""
        empty: float | None = None
        stopped: float | None = None
        while True:
            now = time.monotonic()
            if stop.is_set():
                stopped = stopped or now
                started = {key_of(member) for member in budget.members}
                for remote in list(remotes.values()):
                    late = now - stopped > STOP_GRACE + STOP_WRITE
                    if (late or remote.key not in started) and not remote.dropped.done():
                        remote.dropped.set_result(None)
            try:
                count = await threads()
            except Exception as exc:  # the scheduler is gone: the slabs' futures say so
                log.debug("cannot count the Dask cluster's workers: %s", exc)
                count = 1
            if count:
                empty = None
            else:
                empty = empty or now
                if now - empty > worker_wait:
                    for remote in list(remotes.values()):
                        if not remote.dropped.done():
                            remote.dropped.set_exception(no_workers())
            if stopped:  # slabs are dropped within a tenth of a second of their time
                await asyncio.sleep(WATCH_EVERY / 10)
            else:
                with suppress(TimeoutError):
                    async with asyncio.timeout(WATCH_EVERY):
                        await stop.wait()

    async def local(report: Report) -> Grant:
        now = time.perf_counter()
        budget.ingest(report, now)
        return Grant(budget.grants(now).get(own.name, 0), stop.is_set(), budget.version)

    async def run_job(job: SlabJob, _flow: FetchFlow) -> SlabResult:
        key = f"slab-{job.slab.series}-{iso(job.slab.start)}-b{job.slab.bucket}-{run}"
        future = dask.submit(run_slab, dataclasses.replace(job, budget=name), key, key=key, pure=False)
        remote = remotes[key] = _Remote(key, future, asyncio.get_running_loop().create_future())
        waiter = asyncio.ensure_future(_result_of(future))
        try:
            either: list[asyncio.Future[Any]] = [waiter, remote.dropped]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                waiter.cancel()
                await dask.cancel([future])
                remote.dropped.result()  # the cluster is lost: raised
                return SlabResult(job.slab.series, windows=len(job.slab.windows))  # stopped: left open
            return waiter.result()
        except EtlError:
            raise
        except (KilledWorker, FutureCancelledError, OSError) as exc:
            raise NetworkError(f"{job!r}: the Dask cluster lost it ({type(exc).__name__}: {exc})") from None
        finally:
            del remotes[key]
            if not remote.dropped.done():
                remote.dropped.cancel()

    serving = Serving(dask, name, budget, stop)
    tasks: list[asyncio.Future[None]] = []
    try:
        await serving.open()
        tasks.append(asyncio.ensure_future(serving.run()))
        session.limit = own
        tasks.append(asyncio.ensure_future(keep_in_touch(own, session, local, busy=False)))
        count = await threads()
        if not count:
            log.warning(
                "the Dask cluster at %s has no workers yet: slabs wait up to %gs (executor.worker_wait) for one",
                address,
                worker_wait,
            )
            deadline = time.monotonic() + worker_wait
            while not (count := await threads()):
                if time.monotonic() > deadline:
                    raise no_workers()
                await asyncio.sleep(WATCH_EVERY / 4)
        tasks.append(asyncio.ensure_future(watch()))
        # Twice the worker threads: workers never wait for the coordinator, and a stop leaves few in flight.
        yield Executor(f"dask {address}", max(2, 2 * count), run_job, remote=True)
    finally:
        for task in tasks:
            task.cancel()
        session.limit = limit
        session.admit()
        await serving.close()
        await dask.close()
