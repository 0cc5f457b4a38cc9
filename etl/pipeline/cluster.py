"""A run's budget on a Dask cluster (etl/client/budget.py) over Dask's own primitives: the members'
reports go to the coordinator through a `distributed.Queue`, and the permits (with whether the run is
stopping) come back in a `distributed.Variable`, both named after the run and kept by the scheduler.

The coordinator's end (`Serving`) reads the reports, feeds its `Budget` and publishes its grants; a
task's end (`TaskLink`) reports and reads its permits every `REPORT_EVERY` seconds. A task whose worker dies
stops reporting, and its permits come back once its lease runs out.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, TypedDict

from etl.client.budget import REPORT_EVERY, Budget, Report

log = logging.getLogger(__name__)

TIMEOUT = 10.0  # seconds a task waits for the scheduler's answer to one exchange


class Grants(TypedDict):
    """The Variable's value: each member's permits, and whether the run is stopping."""

    grants: dict[str, int]
    stop: bool


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
        state: Grants = {"grants": self.budget.grants(now), "stop": self.stop.is_set()}
        await self.variable.set(state)
        self.published = state

    async def run(self) -> None:
        reader = asyncio.ensure_future(self._read())
        at = time.perf_counter()
        try:
            while not reader.done():
                await asyncio.sleep(REPORT_EVERY)
                now = time.perf_counter()
                state: Grants = {"grants": self.budget.grants(now), "stop": self.stop.is_set()}
                if state != self.published or now - at > self.budget.lease / 4:
                    await self._publish(now)
                    at = now
            reader.result()
        except Exception as exc:  # the scheduler is gone: the slabs' futures say so
            log.debug("the budget's exchanges ended: %s", exc)
        finally:
            reader.cancel()

    async def _read(self) -> None:
        """Reports as they come: a get waits for one without a timeout (a get that times out is an error
        the scheduler logs with its traceback), and `close` sends the one that ends it."""
        while True:
            reports = [await self.queue.get()]
            reports += await self.queue.get(batch=True)
            now = time.perf_counter()
            for report in reports:
                if not report["member"]:
                    return
                self.budget.ingest(report, now)

    async def close(self) -> None:
        try:
            await self.queue.put(_LAST)
            self.variable.delete()
            self.queue.close()
        except Exception as exc:  # the scheduler is gone: so are they
            log.debug("could not remove the budget's queue and variable: %s", exc)


_LAST: Report = {"member": "", "samples": [], "wants": 0, "on_wire": 0, "done": True}


class TaskLink:
    """A task's end, made in the worker's thread (where Dask's `get_client` works): its exchanges run in
    a thread of their own beside the task's event loop."""

    def __init__(self, name: str, key: str) -> None:
        from distributed import Queue, Variable, get_client

        client = get_client()
        self.member = member_name(key)
        self._queue = Queue(name, client=client)
        self._variable = Variable(name, client=client)

    def _exchange(self, report: Report) -> tuple[int, bool]:
        self._queue.put(report, timeout=TIMEOUT)
        state: Grants = self._variable.get(timeout=TIMEOUT)
        return state["grants"].get(self.member, 0), state["stop"]

    async def exchange(self, report: Report) -> tuple[int, bool] | None:
        return await asyncio.to_thread(self._exchange, report)

    def close(self, report: Report) -> None:
        """The last report (`done`: the permits go back at once), and the queue let go."""
        try:
            self._queue.put(report, timeout=TIMEOUT)
        except Exception as exc:  # its lease expires instead
            log.debug("could not tell the budget this task ended: %s", exc)
        self._queue.close()
