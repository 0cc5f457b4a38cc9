"""Tasks of one event loop brought to a state by turns of the loop, never by the clock: `until` a
condition holds, or `settle` (what the tasks can do without anything from outside)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

TURNS = 1000  # far more than any chain of steps the tests wait for; a condition that never holds fails


async def until(condition: Callable[[], bool], what: str = "the condition", turns: int = TURNS) -> None:
    """Turns of the loop until `condition()` holds; an AssertionError naming `what` if it never does."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what} never held in {turns} turns of the event loop")


async def settle(turns: int = 50) -> None:
    """`turns` turns of the loop: the ready tasks run until each waits for something only the test gives."""
    for _ in range(turns):
        await asyncio.sleep(0)
