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
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from etl.client import MonitoringClient
from etl.errors import EtlError, NetworkError
from etl.pipeline.build import Build
from etl.pipeline.slab import SlabJob, SlabResult, process_slab, run_slab
from etl.support.optional import require
from etl.timeutil import iso

log = logging.getLogger("etl")

RunJob = Callable[[SlabJob], Awaitable[SlabResult]]
Commit = Callable[[SlabJob, SlabResult], Awaitable[None]]
Fail = Callable[[SlabJob, BaseException], None]
Drain = Callable[[], Awaitable[None]]


MAX_SLABS = 32  # slabs in flight at most, however small (each holds a few open files)


@dataclass(frozen=True)
class Executor:
    name: str
    in_flight: int  # slabs admitted at once, whatever their size
    run_job: RunJob
    remote: bool = False  # jobs run in other processes, maybe on other machines
    windows: int = 0  # more (small) slabs are admitted while their windows stay under this


class _Admission:
    """Slabs in flight: at least `in_flight` of them, more while their windows stay under a budget, so a
    small fleet (slabs of a few windows) still keeps every request slot busy."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.slabs = self.windows = 0
        self.changed = asyncio.Condition()

    def _room(self, size: int) -> bool:
        return self.slabs < self.executor.in_flight or (
            self.slabs < MAX_SLABS and self.windows + size <= self.executor.windows
        )

    async def enter(self, size: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self._room(size))
            self.slabs += 1
            self.windows += size

    async def leave(self, size: int) -> None:
        async with self.changed:
            self.slabs -= 1
            self.windows -= size
            self.changed.notify_all()

    async def idle(self) -> None:
        """Until every admitted slab has run."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.slabs == 0)


async def execute(
    executor: Executor,
    jobs: Iterator[SlabJob],
    commit: Commit,
    fail: Fail,
    stop: asyncio.Event,
    drain: Drain | None = None,
) -> None:
    admission = _Admission(executor)

    async def one(job: SlabJob) -> None:
        try:
            result = await executor.run_job(job)
        except Exception as exc:  # a write that failed (disk full...), a lost cluster, or a bug
            fail(job, exc)
            return
        finally:
            await admission.leave(len(job.slab.windows))
        try:
            await commit(job, result)
        except Exception as exc:  # a commit that failed
            fail(job, exc)

    running: set[asyncio.Task] = set()
    try:
        for job in jobs:
            await admission.enter(len(job.slab.windows))
            if stop.is_set():
                await admission.leave(len(job.slab.windows))  # admitted, never run
                break
            task = asyncio.ensure_future(one(job))
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
    """Slabs share the run's client: one sign-in, one pool, `extract.concurrency` requests in all."""
    extract = build.config.extract
    return Executor(
        "local",
        extract.slabs_in_flight,
        lambda job: process_slab(job, client, build.slab_writer(job.slab), stop),
        windows=4 * extract.concurrency,
    )


@asynccontextmanager
async def dask_executor(address: str, connect_timeout: float = 30.0) -> AsyncIterator[Executor]:
    """Each slab is one task (run_slab: its own client, its own files); a task of a lost worker is
    rescheduled by Dask and redone from scratch, which rewrites the same files."""
    require("distributed", "the dask executor")
    from distributed import Client
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    try:
        client = await Client(address, asynchronous=True, timeout=connect_timeout)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NetworkError(f"cannot reach the Dask scheduler at {address}: {reason}") from None
    run = uuid.uuid4().hex[:8]

    async def run_job(job: SlabJob) -> SlabResult:
        key = f"slab-{job.slab.series}-{iso(job.slab.start)}-b{job.slab.bucket}-{run}"
        try:
            return await client.submit(run_slab, job, key=key, pure=False)
        except EtlError:
            raise
        except (KilledWorker, FutureCancelledError, OSError) as exc:
            raise NetworkError(f"{job!r}: the Dask cluster lost it ({type(exc).__name__}: {exc})") from None

    try:
        threads = sum((await client.nthreads()).values())
        if not threads:
            log.warning("the Dask cluster at %s has no workers yet: slabs wait for one", address)
        # Twice the worker threads: workers never wait for the coordinator, and a stop leaves few in flight.
        yield Executor(f"dask {address}", max(2, 2 * threads), run_job, remote=True)
    finally:
        await client.close()
