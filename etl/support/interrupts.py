"""A Ctrl-C noted as well as raised, for the moments it cannot be raised.

Until a run's event loop takes SIGINT over, Python raises KeyboardInterrupt wherever the interpreter is.
When that is a weakref callback of the import machinery (a module lock let go while etl's modules load),
the exception is printed as "Exception ignored" and lost, and the command would go on to finish with exit
0. The CLI's handler raises as Python's does and also notes the signal; a run asks `pending()` once it
handles signals itself.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_seen = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _seen
    _seen = True
    raise KeyboardInterrupt


def install() -> Callable[[], None]:
    """Handle SIGINT so (main thread only); returns what puts the previous handler back and forgets the
    signal (a run started later in this process, not from the CLI, is not interrupted by it)."""
    global _seen
    _seen = False
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, _on_sigint)

    def restore() -> None:
        global _seen
        _seen = False
        signal.signal(signal.SIGINT, previous)

    return restore


def pending() -> bool:
    """Whether a SIGINT came since `install`, raised or lost."""
    return _seen


@contextmanager
def deferred() -> Iterator[None]:
    """A SIGINT that comes meanwhile is held until the block ends (main thread): for code that a
    KeyboardInterrupt must not cut in two, such as a logging handler half made (registered for the
    interpreter's shutdown, its lock not yet there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
