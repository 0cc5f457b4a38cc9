"""Allocator settings for long runs: freed large buffers go back to the OS, so a run's memory follows
what it holds rather than what it once held (the 1-week vs 10-week figures in benchmarks/)."""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time

import pyarrow as pa

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD = 1024 * 1024


def release_freed_memory() -> None:
    """Call once, before the work starts (it changes process-wide settings)."""
    # Arrow's default allocator (mimalloc) keeps freed pages in per-thread caches; through the
    # system allocator, with the threshold below, every Arrow buffer over it is unmapped when freed.
    # (This is the pool pyarrow passes; Arrow's C++ readers and writers use the process default, which
    # etl/__init__.py sets before pyarrow loads.)
    pa.set_memory_pool(pa.system_memory_pool())
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = _libc()
        # A slab's tables and encoded files are larger than this: each gets its own mapping, unmapped
        # when freed. Answers and their columns (a few hundred kB) are not: as mappings, each was paged
        # in and zeroed afresh and its unmapping stopped the other threads' cores (9% of a run's CPU at
        # 128 kB; at 1 MB, +3 to +10 MB of peak RSS from 48 to 40,000 parameters, docs/performance.md).
        # A fixed value also stops glibc from raising the threshold after every large free, which would
        # move larger buffers into per-thread heaps that seldom shrink.
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass  # not glibc (musl...): its defaults stay


_last_trim = 0.0


def trim(every: float = 0.0) -> None:
    """Give the heap's free pages back to the OS: after a phase that made many short-lived objects
    (listing a wide fleet), so the next phase's peak does not stack on the last one's leftovers.
    With `every`, at most once per that many seconds (callers in a hot loop)."""
    global _last_trim
    if not sys.platform.startswith("linux"):
        return
    now = time.monotonic()
    if every and now - _last_trim < every:
        return
    _last_trim = now
    with contextlib.suppress(OSError, AttributeError):
        _libc().malloc_trim(0)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6")
