"""The platform's capacity: `capacity` workers, each busy `service_time` seconds a request, and a queue
in arrival order for the requests that find them all busy; past `queue_max` waiting, a request is
refused (503) at once. The settings are `Faults`' (changed while serving through the control API); with
no capacity every request is served at once, still busy `service_time`."""

from __future__ import annotations

import asyncio
from collections import deque

from etl_emulator.faults import FaultPlan


class Workers:
    """The server's workers and their queue, in one process (each uvicorn worker process has its own)."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.busy = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def enter(self) -> bool:
        """Wait for a worker, in turn; False: the queue is full, the request is refused."""
        faults = self.plan.faults
        if faults.capacity is None or (self.busy < faults.capacity and not self.waiting):
            self.busy += 1
            return True
        if faults.queue_max is not None and len(self.waiting) >= faults.queue_max:
            return False
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:  # the client went away while it waited
            if turn.done() and not turn.cancelled():
                self.leave()  # handed a worker just as it was cancelled
            raise
        return True

    def leave(self) -> None:
        self.busy -= 1
        self.settle()

    def settle(self) -> None:
        """Hand free workers to the requests that wait (after a request ends, or the capacity grew)."""
        capacity = self.plan.faults.capacity
        while self.waiting and (capacity is None or self.busy < capacity):
            turn = self.waiting.popleft()
            if not turn.done():
                self.busy += 1
                turn.set_result(None)
