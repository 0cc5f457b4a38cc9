"""The event loop a run goes on (uvloop where it exists; a thread of its own inside a notebook's loop),
its pool of worker threads, and SIGINT/SIGTERM heard through it."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from etl.support import cpus

T = TypeVar("T")


def in_a_loop(work: Coroutine[Any, Any, T]) -> T:
    """The run on uvloop where it exists (a run spends its loop's time in socket reads, which uvloop does
    in C); in a thread of its own where this thread already runs a loop (a notebook)."""
    try:
        import uvloop

        start: Callable[[Coroutine[Any, Any, T]], T] = uvloop.run
    except ImportError:
        start = asyncio.run
    if _loop_running():
        with ThreadPoolExecutor(1, thread_name_prefix="etl-run") as pool:
            return pool.submit(start, work).result()
    if threading.current_thread() is not threading.main_thread():
        return start(work)
    # SIGTERM stops like Ctrl-C: while windows are fetched, after those in flight (the coordinator's own
    # handlers); before, by unwinding (a temp file left behind is swept by the next run).
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return start(work)
    finally:
        signal.signal(signal.SIGTERM, previous)


def handle_signals(on_signal: Callable[[int], None]) -> Callable[[], None]:
    """SIGINT and SIGTERM handled by `on_signal(signum)` through the running loop (a KeyboardInterrupt
    raised inside one of the loop's callbacks can be lost). Returns what puts the previous handlers back."""
    # Signal handlers belong to the main thread; a run driven from another thread is stopped by its owner.
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        loop.add_signal_handler(signum, on_signal, signum)

    def restore() -> None:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)  # asyncio would leave SIG_DFL: keep the CLI's handlers

    return restore


def workers() -> ThreadPoolExecutor:
    """The loop's pool for local output, where files are written and large answers decoded: one thread
    a usable core. Both are CPU (Arrow, Parquet, zstd) that holds the GIL between its calls, so threads
    beyond the cores only take turns for it and cost CPU in switching. Object stores keep Python's
    default: their writes wait on the network."""
    return ThreadPoolExecutor(max(2, cpus.usable()), thread_name_prefix="etl-work")


def _loop_running() -> bool:
    """Asked outside any except block: a run started while an exception is being handled would give
    every error it raises that exception as its context."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
