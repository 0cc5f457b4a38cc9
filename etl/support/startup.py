"""What the `etl` command changes process-wide, in etl's own process only (never in a program that imports
etl): the cyclic garbage collector while the command loads, and what libraries read once as they load.

Loading a command makes tens of thousands of objects that live as long as the process (classes, functions,
pydantic's and click's tables), which the collector would walk again and again as they pile up, and at each
full collection during the run. So the command loads with the collector off, and what it loaded is then
frozen out of the collector's sight (`gc.freeze`); the run's own objects are collected as usual.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType

_own_process = False


def begin() -> None:
    """From the `etl` command's first statement, in etl's own process; the collector is off until `loaded()`."""
    global _own_process
    _own_process = True
    gc.disable()
    # httpx imports its own command-line tool (rich, pygments) when it loads, and falls back to a stub when
    # that import fails; no etl command runs it.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    # numpy's OpenBLAS starts a worker thread per core that busy-waits for work it will never get (etl does
    # no linear algebra). Read once, when numpy loads; a value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Arrow's C++ default pool (mimalloc) keeps freed pages in an arena of its own that no later phase of a
    # run gets back; the system allocator gives them back (support/allocator.py). Read once, when Arrow first
    # allocates: pyarrow is not loaded yet.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def started_as_etl() -> bool:
    """Whether the interpreter was started as the `etl` command (`python [options] -m etl`, or a script that
    is sys.argv[0]: the console script) rather than for a program that runs the command in turn (a
    profiler, runpy, `-c`), read from the interpreter's own arguments."""
    args = iter(sys.orig_argv[1:])
    for arg in args:
        if arg == "--check-hash-based-pycs":
            next(args, None)
        elif arg in ("-", "--") or arg.startswith("--"):
            return False
        elif not arg.startswith("-"):
            return arg == sys.argv[0]
        else:  # short options, several to an argument; -c, -m, -W and -X take a value
            for at, flag in enumerate(arg[1:], start=2):
                if flag in "cmWX":
                    value = arg[at:] or next(args, "")
                    if flag in "cm":
                        return flag == "m" and value == "etl"
                    break
    return False


def own_process() -> bool:
    """Whether this process is the `etl` command's own (`begin` was called)."""
    return _own_process


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


class _PandasForEtlOnly(MetaPathFinder):
    """An import hook that keeps pandas out of an `etl run` (or `etl verify`) process, where nothing
    converts to pandas:
    pyarrow imports it (some 300 modules, a good part of a small run's CPU) the first time
    `pa.array()` is handed a numpy array or an array is turned into numpy, only to ask whether a value
    is a pandas object. pyarrow works without it. etl.timeutil's parser of odd stamps still gets it."""

    ALLOWED = ("etl.timeutil",)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "pandas":
            return None
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__") in self.ALLOWED:
                return None  # the normal finders take it from here
            frame = frame.f_back
        raise ImportError("pandas is not imported by an etl run (etl/support/startup.py)")


@contextmanager
def without_pandas() -> Iterator[None]:
    """pandas kept out of what runs inside (see _PandasForEtlOnly)."""
    if "pandas" in sys.modules:  # imported already (by a program embedding the CLI): leave it be
        yield
        return
    hook = _PandasForEtlOnly()
    sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        sys.meta_path.remove(hook)
