"""Where slabs run: in this process (one shared client, as always) or on a dask.distributed cluster.

Both executors take slabs from the plan as they go (the plan makes them lazily), a bounded number at
a time, in plan order, and hand each result to the coordinator's `commit` as soon as it arrives; the
coordinator checkpoints it. A stop (a signal, a fatal error) admits no more slabs; those in flight
write what they fetched and are committed, on the cluster too.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from etl.build import Build
from etl.client import MonitoringClient
from etl.errors import EtlError, NetworkError
from etl.optional import require
from etl.slab import SlabJob, SlabResult, process_slab, run_slab
from etl.timeutil import iso

log = logging.getLogger("etl")

RunJob = Callable[[SlabJob], Awaitable[SlabResult]]
Commit = Callable[[SlabJob, SlabResult], Awaitable[None]]
Fail = Callable[[SlabJob, BaseException], None]


@dataclass(frozen=True)
class Executor:
    name: str
    in_flight: int  # slabs admitted at once
    run_job: RunJob
    remote: bool = False  # jobs run in other processes, maybe on other machines


async def execute(executor: Executor, jobs: Iterator[SlabJob], commit: Commit, fail: Fail,
                  stop: asyncio.Event) -> None:
    admit = asyncio.Semaphore(executor.in_flight)

    async def one(job: SlabJob) -> None:
        try:
            await commit(job, await executor.run_job(job))
        except Exception as exc:  # a write that failed (disk full...), a lost cluster, or a bug
            fail(job, exc)
        finally:
            admit.release()

    running: set[asyncio.Task] = set()
    try:
        for job in jobs:
            await admit.acquire()
            if stop.is_set():
                break
            task = asyncio.ensure_future(one(job))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)
    except BaseException:
        for task in running:
            task.cancel()
        raise


def local_executor(client: MonitoringClient, build: Build, slabs_in_flight: int, stop: asyncio.Event) -> Executor:
    """Slabs share the run's client: one sign-in, one pool, `extract.concurrency` requests in all."""
    return Executor("local", slabs_in_flight,
                    lambda job: process_slab(job, client, build.slab_writer(job.slab), stop))


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
