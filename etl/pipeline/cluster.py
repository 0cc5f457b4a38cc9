"""A run's budget on a Dask cluster (etl/client/budget.py) over Dask's own primitives: the members'
reports go to the coordinator through a `distributed.Queue`, and the permits (with whether the run is
stopping) come back in a `distributed.Variable`, both named after the run and kept by the scheduler.

The coordinator's end (`Serving`) reads the reports, feeds its `Budget` and publishes its grants; a
task's end (`TaskLink`) reports and reads its permits every `REPORT_EVERY` seconds, in one exchange with
the other tasks of its worker process. A task whose worker dies stops reporting, and its permits come back
once its lease runs out.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from contextlib import suppress
from typing import Any, TypedDict

from etl.client.budget import REPORT_EVERY, Budget, Grant, Report

log = logging.getLogger(__name__)

TIMEOUT = 10.0  # seconds a task waits for the scheduler's answer to one exchange


class Grants(TypedDict):
    """The Variable's value: each member's permits, whether the run is stopping, and their version."""

    grants: dict[str, int]
    stop: bool
    version: int


def member_name(key: str) -> str:
    """A task's name in the budget: its key and its attempt (a task redone after its worker died is a new
    member; the lost one's permits expire)."""
    return f"{key}#{uuid.uuid4().hex[:6]}"


def key_of(member: str) -> str:
    return member.partition("#")[0]


class Serving:
    """The coordinator's end: `open` makes the queue and the variable (before any task asks), `run` feeds
    the reports to the budget and publishes its grants until cancelled (when they change, and at least
    four times a lease, so that a task's permits never lapse for want of news), `close` lets them go."""

    def __init__(self, client: Any, name: str, budget: Budget, stop: asyncio.Event) -> None:
        from distributed import Queue, Variable

        self.client, self.budget, self.stop = client, budget, stop
        self.queue = Queue(name, client=client)
        self.variable = Variable(name, client=client)
        self.published: Grants | None = None

    async def open(self) -> None:
        await self.queue
        await self._publish(time.perf_counter())

    async def _publish(self, now: float) -> None:
        await self.variable.set(state := self._state(now))
        self.published = state

    def _state(self, now: float) -> Grants:
        budget = self.budget
        return {"grants": budget.grants(now), "stop": self.stop.is_set(), "version": budget.version}

    async def run(self) -> None:
        reader = asyncio.ensure_future(self._read())
        at = time.perf_counter()
        try:
            while not reader.done():
                await asyncio.sleep(REPORT_EVERY)
                now = time.perf_counter()
                state = self._state(now)
                if state != self.published or now - at > self.budget.lease / 4:
                    await self._publish(now)
                    at = now
            reader.result()
        except Exception as exc:  # the scheduler is gone: the slabs' futures say so
            log.debug("the budget's exchanges ended: %s", exc)
        finally:
            reader.cancel()

    async def _read(self) -> None:
        """Reports as they come, a list from each worker process: a get waits for one without a timeout
        (a get that times out is an error the scheduler logs with its traceback), and `close` sends the one
        that ends it."""
        while True:
            batches = [await self.queue.get()]
            batches += await self.queue.get(batch=True)
            now = time.perf_counter()
            for report in (report for batch in batches for report in batch):
                if not report["member"]:
                    return
                self.budget.ingest(report, now)

    async def close(self) -> None:
        """A task still running (one the run stopped waiting for) hears that the run stops; the reader ends,
        and the queue and the variable go."""
        try:
            await self.variable.set({"grants": {}, "stop": True, "version": self.budget.version})
            await self.queue.put([_LAST])
            self.variable.delete()
            self.queue.close()
        except Exception as exc:  # the scheduler is gone: so are they
            log.debug("could not remove the budget's queue and variable: %s", exc)


_LAST: Report = {"member": "", "samples": [], "wants": 0, "on_wire": 0, "done": True}


class TaskLink:
    """A task's end, made in the worker's thread (where Dask's `get_client` works). The tasks of one worker
    process share its exchanges (`_Process`): one put of their reports and one read of the grants a period,
    whatever the worker's threads."""

    def __init__(self, name: str, key: str) -> None:
        self.member = member_name(key)
        with _LOCK:
            process = _PROCESSES.get(name)
            if process is None or not process.open:
                process = _PROCESSES[name] = _Process(name)
            process.tasks += 1
        self._process = process

    async def exchange(self, report: Report) -> Grant | None:
        """This task's permits and the run's stop, at the process's next exchange (None: no answer)."""
        answer: Answer = asyncio.get_running_loop().create_future()
        self._process.send(report, answer)
        return await answer

    def close(self, report: Report) -> None:
        """The last report (`done`: the permits go back at once); the process's exchanges end with its last
        task's."""
        self._process.send(report, None)
        with _LOCK:
            self._process.tasks -= 1


Answer = asyncio.Future[Grant | None]


class _Process:
    """The exchanges of one worker process's tasks with one run's budget, in a thread of their own."""

    def __init__(self, name: str) -> None:
        from distributed import Queue, Variable, get_client

        client = get_client()
        self.name = name
        self.queue = Queue(name, client=client)
        self.variable = Variable(name, client=client)
        self.tasks = 0
        self.open = True
        self._waiting: list[tuple[Report, Answer | None]] = []
        threading.Thread(target=self._run, name=f"etl-budget-{name}", daemon=True).start()

    def send(self, report: Report, answer: Answer | None) -> None:
        with _LOCK:
            self._waiting.append((report, answer))

    def _run(self) -> None:
        while True:
            time.sleep(REPORT_EVERY)
            with _LOCK:
                batch, self._waiting = self._waiting, []
                if not batch and not self.tasks:
                    self.open = False
                    if _PROCESSES.get(self.name) is self:
                        del _PROCESSES[self.name]
                    break
            if batch:
                self._exchange(batch)
        try:
            self.queue.close()
        except Exception as exc:  # the scheduler is gone: so is the queue
            log.debug("could not let the budget's queue go: %s", exc)

    def _exchange(self, batch: list[tuple[Report, Answer | None]]) -> None:
        try:
            self.queue.put([report for report, _ in batch], timeout=TIMEOUT)
            state: Grants | None = self.variable.get(timeout=TIMEOUT)
        except Exception as exc:  # the budget is unreachable for now: each member's lease says how long
            log.debug("no answer from the budget: %s", exc)
            state = None
        for report, answer in batch:
            if answer is None:
                continue
            value = None
            if state is not None:
                value = Grant(state["grants"].get(report["member"], 0), state["stop"], state["version"])
            with suppress(RuntimeError):  # its task's loop is closed: it ended meanwhile
                answer.get_loop().call_soon_threadsafe(_settle, answer, value)


def _settle(answer: Answer, value: Grant | None) -> None:
    if not answer.done():
        answer.set_result(value)


_LOCK = threading.Lock()
_PROCESSES: dict[str, _Process] = {}  # this worker process's exchanges, by budget
