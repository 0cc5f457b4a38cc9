"""Slabs' checkpoints committed in groups (Parquet/CSV datasets; lake tables commit theirs with their rows)."""

from __future__ import annotations

import asyncio

from etl.model import Windows
from etl.state.store import StateStore


class GroupCommit:
    """Slabs' windows checkpointed in groups: those whose files became durable while a checkpoint was
    being written go into the next one together. The end of a run finishes dozens of slabs at once,
    whose checkpoints (a file and an fsync each) were written one after another while nothing else ran."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.lock = asyncio.Lock()
        self.waiting: list[tuple[Windows, asyncio.Future[None]]] = []

    async def commit(self, windows: Windows) -> None:
        """Once `windows` are in a checkpoint (this call's or a group's written meanwhile)."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((windows, held))
        async with self.lock:
            group, self.waiting = self.waiting, []
            if group:
                try:
                    await asyncio.to_thread(self.store.commit, *(w for w, _ in group))
                except BaseException as exc:
                    for _, future in group:
                        if future is not held:
                            future.set_exception(exc)
                            future.exception()  # seen: a waiter cancelled meanwhile would leave it unread
                    raise
                for _, future in group:
                    future.set_result(None)
        await held
