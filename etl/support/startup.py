"""The cyclic garbage collector while the `etl` command loads (etl's own process only, never a program
that imports etl).

Loading a command makes some 60,000 objects that live as long as the process (classes, functions,
pydantic's and click's tables), and the collector walks them again and again as they pile up: 0.04-0.05
CPU-s of a run's 0.4 CPU-s of imports, then 25-45 ms for each full collection during the run. So the
command loads with the collector off, and what it loaded is then frozen out of the collector's sight
(`gc.freeze`); the run's own objects are collected as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_own_process = False


def begin() -> None:
    """From the `etl` command's first statement, until `loaded()`."""
    global _own_process
    _own_process = True
    gc.disable()


def loaded() -> None:
    """The command's modules are in: freeze them and collect from here on."""
    if _own_process:
        gc.freeze()
        gc.enable()


@contextmanager
def loading() -> Iterator[None]:
    """Around imports a command makes once it has started (the pipeline, after the config is read)."""
    if not _own_process:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        loaded()
