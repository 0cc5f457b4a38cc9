"""The event loop a run goes on (uvloop where it exists; a thread of its own inside a notebook's loop),
its pool of worker threads, and SIGINT/SIGTERM heard through it (in a notebook, the kernel's interrupt
passed on from the thread that waits for the run)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
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
        return _beside_the_loop(start, work)
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
    # Signal handlers belong to the main thread; a run driven from another thread is stopped by its owner:
    # by the thread that waits for it in a notebook (`_beside_the_loop`), else not at all.
    if threading.current_thread() is not threading.main_thread():
        relay = _run_thread.relay
        return relay.attach(asyncio.get_running_loop(), on_signal) if relay else lambda: None
    loop = asyncio.get_running_loop()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        loop.add_signal_handler(signum, on_signal, signum)

    def restore() -> None:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)  # asyncio would leave SIG_DFL: keep the CLI's handlers

    return restore


class _Relay:
    """A KeyboardInterrupt of the thread that waits for a run, passed to the run's loop as a SIGINT: signals
    reach only the main thread, where a notebook's kernel waits while the run goes on in another."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._target: tuple[asyncio.AbstractEventLoop, Callable[[int], None]] | None = None
        self._missed = False  # an interrupt before the run handled signals: passed on when it does

    def attach(self, loop: asyncio.AbstractEventLoop, on_signal: Callable[[int], None]) -> Callable[[], None]:
        with self._guard:
            self._target, missed, self._missed = (loop, on_signal), self._missed, False
        if missed:
            loop.call_soon(on_signal, signal.SIGINT)

        def detach() -> None:
            with self._guard:
                self._target = None

        return detach

    def interrupt(self) -> None:
        with self._guard:
            if self._target is None:
                self._missed = True
                return
            loop, on_signal = self._target
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the run is over
            loop.call_soon_threadsafe(on_signal, signal.SIGINT)


class _RunThread(threading.local):
    relay: _Relay | None = None  # in the thread a notebook's run goes on


_run_thread = _RunThread()


def _beside_the_loop(start: Callable[[Coroutine[Any, Any, T]], T], work: Coroutine[Any, Any, T]) -> T:
    """The run in a thread of its own, for a caller whose thread runs a loop already (a notebook's kernel).
    A KeyboardInterrupt here (the kernel's interrupt) stops the run as Ctrl-C stops `etl run`: the caller
    gets the run's own outcome once it has stopped, `Interrupted` or, when it had finished, its result."""
    relay = _Relay()
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def go() -> None:
        _run_thread.relay = relay
        try:
            outcome.set_result(start(work))
        except BaseException as exc:  # the run's outcome, raised in the caller's thread
            outcome.set_exception(exc)

    # In the caller's context: a notebook's kernel tells which cell output belongs to by context variables.
    thread = threading.Thread(target=contextvars.copy_context().run, args=(go,), name="etl-run")
    thread.start()
    interrupts = 0
    while True:
        try:
            if interrupts:  # passed on out here: a second interrupt may come while this one is
                relay.interrupt()
                interrupts = 0
            concurrent.futures.wait([outcome])
            break
        except KeyboardInterrupt:
            interrupts += 1
    return outcome.result()  # the thread ends right after setting it: no join an interrupt could break


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
