"""The local executor's admission keeps request slots busy whatever a slab's size: a slab counts by what
it still has to fetch, so one that is writing its files lets the next one in (etl/pipeline/executors.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from etl.pipeline.executors import MAX_SLABS, Executor, execute
from etl.pipeline.slab import FetchFlow, SlabResult


def _job(windows: int) -> SimpleNamespace:
    return SimpleNamespace(slab=SimpleNamespace(windows=range(windows), series="raw", start=0))


class _Run:
    """Fake slabs: each launches its windows at once, 'fetches' them when told, then 'writes' them until
    released. Records how many windows wait for a fetch at most, and how many slabs ran at once."""

    def __init__(self) -> None:
        self.fetch, self.write = asyncio.Event(), asyncio.Event()
        self.queued = self.most_queued = self.slabs = self.most_slabs = 0
        self.started = 0

    async def job(self, job: SimpleNamespace, flow: FetchFlow) -> SlabResult:
        self.started += 1
        self.slabs += 1
        self.most_slabs = max(self.most_slabs, self.slabs)
        n = len(job.slab.windows)
        for _ in range(n):
            flow.launched()
        self.queued += n
        self.most_queued = max(self.most_queued, self.queued)
        await self.fetch.wait()
        for _ in range(n):
            flow.fetched()
        self.queued -= n
        await self.write.wait()
        flow.released(n)
        self.slabs -= 1
        return SlabResult("raw", windows=n)


def _execute(run: _Run, executor: Executor, jobs: list, until) -> list:
    done: list = []

    async def commit(job, result) -> None:
        done.append(result)

    async def main() -> None:
        task = asyncio.ensure_future(execute(executor, iter(jobs), commit, _fail, asyncio.Event()))
        await until(run)
        run.fetch.set()
        run.write.set()
        await task

    asyncio.run(main())
    return done


def _fail(_job, exc: BaseException) -> None:
    raise AssertionError(exc)


async def _settle(_run: _Run) -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_small_slabs_are_admitted_until_the_request_slots_have_work():
    run = _Run()
    executor = Executor("t", 2, run.job, slots=lambda: 16, hold_min=128, ahead=128)
    done = _execute(run, executor, [_job(3) for _ in range(40)], _settle)
    assert len(done) == 40
    # 2 slabs in flight would give 6 windows to 16 request slots; admission went on to 32 waiting
    assert run.most_queued >= 32 and run.most_slabs == 11


def test_a_slab_writing_its_files_makes_room_for_the_next():
    run = _Run()
    executor = Executor("t", 1, run.job, slots=lambda: 4, hold_min=64, ahead=64)

    async def fetched_then_check(r: _Run) -> None:
        await _settle(r)
        assert r.started == 1  # one slab's 20 windows wait: enough for 8 slots
        r.fetch.set()  # its windows are fetched; it writes (nothing is released yet)
        await _settle(r)
        assert r.started == 3  # the others came in while the first writes

    done = _execute(run, executor, [_job(20) for _ in range(3)], fetched_then_check)
    assert len(done) == 3


def test_fetched_but_unwritten_windows_bound_the_admission():
    run = _Run()
    executor = Executor("t", 1, run.job, slots=lambda: 4, hold_min=30, ahead=64)

    async def check(r: _Run) -> None:
        r.fetch.set()  # every fetch ends at once; nothing is written
        await _settle(r)
        assert r.started == 3  # 10 + 10 + 10 windows held: no fourth slab

    _execute(run, executor, [_job(10) for _ in range(6)], check)


def test_a_remote_executor_admits_its_in_flight_only():
    run = _Run()
    executor = Executor("t", 3, run.job, remote=True)
    _execute(run, executor, [_job(1) for _ in range(MAX_SLABS)], _settle)
    assert run.most_slabs == 3
