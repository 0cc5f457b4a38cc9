"""Slabs' checkpoints committed in groups (Parquet/CSV datasets; lake tables commit theirs with their rows)."""

from __future__ import annotations

import asyncio
from functools import partial

from etl.model import Windows
from etl.state.arrivals import Arrivals
from etl.state.store import StateStore


class GroupCommit:
    """Slabs' windows checkpointed in groups: those whose files became durable while a checkpoint was
    being written go into the next one together. The end of a run finishes dozens of slabs at once,
    whose checkpoints (a file and an fsync each) were written one after another while nothing else ran."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.lock = asyncio.Lock()
        self.waiting: list[tuple[Windows, Arrivals, asyncio.Future[None]]] = []

    async def commit(self, windows: Windows, arrivals: Arrivals) -> None:
        """Once `windows` and what arrived in them are in a checkpoint (this call's or a group's written
        meanwhile)."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((windows, arrivals, held))
        async with self.lock:
            group, self.waiting = self.waiting, []
            if group:
                merged = Arrivals()
                for _, part, _ in group:
                    merged.merge(part)
                try:
                    await asyncio.to_thread(
                        partial(self.store.commit, *(w for w, _, _ in group), arrivals=merged)
                    )
                except BaseException as exc:
                    for _, _, future in group:
                        if future is not held:
                            future.set_exception(exc)
                            future.exception()  # seen: a waiter cancelled meanwhile would leave it unread
                    raise
                for _, _, future in group:
                    future.set_result(None)
        await held
