"""The sample read again: each window fetched and cleaned as a run would (etl/pipeline/fetch.py and
etl/pipeline/clean.py) and compared with the output's rows of it, a group at a time.

A group is one span of one series and one file bucket, at most `extract.batch_windows` windows; its
output rows are read in a thread while its windows are fetched, and at most `extract.slabs_in_flight`
groups are under way at once, so what verify holds is bounded by the configuration. Once the client's
`--max-requests` is spent, the windows left are counted as not verified; a window whose fetch fails
without ending the command (an unreadable answer, a parameter throttled to the end) is counted as
failed; any other error ends the command, as it ends a run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np

from etl.client import MonitoringClient
from etl.config import ExtractConfig
from etl.errors import EtlError, RequestsSpent, without_frames
from etl.model import Window, Windows
from etl.ops.verify.compare import compare
from etl.ops.verify.read import OutputReader
from etl.ops.verify.result import Result
from etl.pipeline.clean import WindowData, clean
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import fetch_window
from etl.support import allocator, redact

TRIM_EVERY = 0.5  # seconds


def groups(spans: Iterator[Windows], reader: OutputReader, size: int) -> Iterator[Windows]:
    """Each span's windows by file bucket (a lake table: all of them), at most `size` at a time."""
    for windows in spans:
        if reader.output.lake is None:
            layout = reader.output.layout(windows.series, reader.buckets)
            buckets = np.fromiter(
                (layout.bucket(p) for p in windows.param_id.tolist()), np.int64, len(windows)
            )
            order = np.argsort(buckets, kind="stable")
            windows, buckets = windows[order], buckets[order]
            cuts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
            bounds = [*cuts.tolist(), len(windows)]
        else:
            bounds = [0, len(windows)]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            for at in range(lo, hi, size):
                yield windows[np.arange(at, min(at + size, hi))]


async def compare_windows(
    client: MonitoringClient,
    reader: OutputReader,
    spans: Iterator[Windows],
    result: Result,
    extract: ExtractConfig,
) -> None:
    """Compare every window of `spans` (or as many as the budget allows), into `result`."""
    room = asyncio.Semaphore(max(1, extract.slabs_in_flight))
    counts = Counts()  # what fetching ran into: a run's figures, not verify's
    spent = False

    async def one(window: Window) -> WindowData:
        return clean(window, await fetch_window(client, window, extract.max_points, counts), counts)

    async def group(windows: Windows) -> None:
        nonlocal spent
        try:
            rows = asyncio.ensure_future(asyncio.to_thread(reader.rows, windows))
            fetched = await asyncio.gather(*(one(w) for w in windows), return_exceptions=True)
            output = await rows
            for got in fetched:
                if isinstance(got, WindowData):
                    w = got.window
                    result.add(compare(got, *output.of(w.param_id, w.start, w.end)))
                elif isinstance(got, RequestsSpent):
                    spent = True
                    result.not_verified += 1
                elif isinstance(got, EtlError) and not got.fatal:
                    result.failed += 1
                    if result.first_failure is None:
                        result.first_failure = redact.redact(str(without_frames(got)))
                        result.failed_code = got.exit_code
                else:
                    raise got
        finally:
            room.release()
        # A group's buffers go back to the OS, not to the next group's peak (not on the event loop:
        # malloc_trim walks every arena).
        await asyncio.to_thread(allocator.trim, TRIM_EVERY)

    try:
        async with asyncio.TaskGroup() as running:
            for windows in groups(spans, reader, extract.batch_windows):
                if spent or (
                    result.max_requests is not None and client.stats.requests >= result.max_requests
                ):
                    spent = True
                    result.not_verified += len(windows)
                    continue
                await room.acquire()
                running.create_task(group(windows))
    except BaseExceptionGroup as errors:  # the first error that ended a group, as a run reports it
        raise errors.exceptions[0] from None
