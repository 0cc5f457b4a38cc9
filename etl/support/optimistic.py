"""Compare-and-swap with a bounded retry: the one shape of every write that may race another writer's (a
lake commit or schema change, a file's rewrite swapped in, a small file updated on S3).

An attempt plans on the version there now and swaps its own in only if that version is still the current
one. An attempt that lost the race (each backend says in one predicate which errors mean that nothing of
it was committed) is planned again on the newer version, after a random wait that doubles with each loss,
so that writers racing in step fall out of it. The error of the last attempt is raised.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from time import sleep
from typing import TypeVar

from etl.errors import LostRace

T = TypeVar("T")

ATTEMPTS = 8


def lost_swap(exc: Exception) -> bool:
    """The predicate of etl's own conditional swaps (files and objects): they raise `LostRace`."""
    return isinstance(exc, LostRace)


def swap(
    attempt: Callable[[], T],
    lost: Callable[[Exception], bool] = lost_swap,
    again: Callable[[], object] = lambda: None,
    attempts: int = ATTEMPTS,
) -> T:
    """`attempt()`'s result, attempted again after each error `lost` says lost a race, `again()` first
    (what the next plan needs: the newer version loaded, our rows merged again), at most `attempts` times."""
    losses = 0
    while True:
        try:
            return attempt()
        except Exception as exc:
            losses += 1
            if losses >= attempts or not lost(exc):
                raise
        sleep(random.uniform(0.01, 0.05) * 2 ** (losses - 1))
        again()
