"""Allocator settings for long runs: freed large buffers go back to the OS, so a run's memory follows
what it holds rather than what it once held (docs/performance.md, "Memory")."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys
import time

import pyarrow as pa

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD = 1024 * 1024
# Free heap worth giving back. Below it a trim costs more than it saves: the next answers fault the same
# pages straight back in. A wide fleet's run holds more free heap than this and is trimmed then, and what
# the heap keeps is bounded by this constant, not by the fleet.
TRIM_ABOVE = 32 * 1024 * 1024


def release_freed_memory() -> None:
    """Call once, before the work starts (it changes process-wide settings)."""
    # Arrow's default allocator (mimalloc) keeps freed pages in per-thread caches; through the
    # system allocator, with the threshold below, every Arrow buffer over it is unmapped when freed.
    # (This is the pool pyarrow passes; Arrow's C++ readers and writers use the process default, which
    # the etl command sets before pyarrow loads: etl/support/startup.py.)
    pa.set_memory_pool(pa.system_memory_pool())
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = _libc()
        # A slab's tables and encoded files are larger than this: each gets its own mapping, unmapped
        # when freed. Answers and their columns (a few hundred kB) are not: as mappings, each was paged
        # in and zeroed afresh and its unmapping stopped the other threads' cores. The heap costs a few MB
        # of peak RSS instead, an offset that does not grow with the fleet (docs/performance.md, "Memory").
        # A fixed value also stops glibc from raising the threshold after every large free, which would
        # move larger buffers into per-thread heaps that seldom shrink.
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass  # not glibc (musl...): its defaults stay


_last_trim = 0.0


def trim(every: float = 0.0) -> None:
    """Give the heap's free pages back to the OS, when there are TRIM_ABOVE of them: after a phase that
    made many short-lived objects (listing a wide fleet), so the next phase's peak does not stack on the
    last one's leftovers. With `every`, at most once per that many seconds (callers in a hot loop)."""
    global _last_trim
    if not sys.platform.startswith("linux"):
        return
    now = time.monotonic()
    if every and now - _last_trim < every:
        return
    _last_trim = now
    with contextlib.suppress(OSError, AttributeError):
        libc = _libc()
        if _free_bytes(libc) >= TRIM_ABOVE:
            libc.malloc_trim(0)


class _Mallinfo2(ctypes.Structure):
    """glibc's struct mallinfo2: ten size_t fields, in this order."""

    _FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS.split()]


def _free_bytes(libc: ctypes.CDLL) -> int:
    """Free bytes in every arena of the heap; a glibc before 2.33 (no mallinfo2): as if many."""
    try:
        mallinfo2 = libc.mallinfo2
    except AttributeError:
        return TRIM_ABOVE
    mallinfo2.restype = _Mallinfo2
    return int(mallinfo2().fordblks)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6")
