"""The run's grouped commits to lake tables: slabs hand over their staged rows, and each table gets one
commit per group of slabs rather than one per slab.

A group is committed when it holds `sink.commit.slabs` slabs or `sink.commit.size` bytes, when its
first slab has waited `sink.commit.interval`, and when the run drains it (its last slab has run, or a
signal or an error stopped it). One commit carries the union of the group's windows as ONE checkpoint
(one version per commit per app); right after it, and before the table's next commit, one state log
segment names the same windows and the (table, version) mark. So at most the last commit of a table is
missing from the state log when a run is killed, and `recover` reads it back from the table. For the
raw table, the group's quality rows are committed to the quality table first (etl/sinks/lake/writer.py).

Commits run in threads, one table at a time per table (several tables at once); the coordinator's
event loop only waits for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa

from etl.config import CommitConfig
from etl.model import QUALITY_TIME_KEY, Series, Windows
from etl.sinks.base import Staged
from etl.sinks.lake import Lake
from etl.sinks.lake.common import Replace
from etl.state import StateStore
from etl.state.arrivals import Arrivals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Landed:
    """Where a slab's rows landed: the commit that holds them, and the data files it added."""

    table: str
    version: int
    files: list[str]
    slabs: int  # in that commit


@dataclass
class _Queue:
    table: str
    pending: list[tuple[Staged, Arrivals, asyncio.Future[Landed]]] = field(default_factory=list)
    nbytes: int = 0
    expected: int = 0  # slabs the run plans for the table (0: unknown)
    submitted: int = 0
    timer: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Committer:
    """Groups the staged slabs of each table and commits each group with its checkpoint."""

    def __init__(
        self,
        lake: Lake,
        store: StateStore,
        source: str,
        checkpoint: tuple[str, str],
        limits: CommitConfig,
        on_commit: Callable[[Landed], None] | None = None,
    ) -> None:
        self.lake, self.store, self.limits = lake, store, limits
        self.source = source  # whose rows the commits replace: never another source's
        self.app, self.run = checkpoint
        self.on_commit = on_commit
        self._queues: dict[str, _Queue] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        self._state = asyncio.Lock()  # the state store writes one segment at a time
        self.commits = 0

    def expect(self, table: str, slabs: int) -> None:
        """The run plans `slabs` slabs for `table`: its group is committed as soon as the last one is in,
        while the other tables' slabs are still fetched (the run's tail holds only the last table's)."""
        self._queues.setdefault(table, _Queue(table)).expected = slabs

    async def submit(self, staged: Staged, arrivals: Arrivals) -> Landed:
        """Add a slab's rows and what arrived in them to its table's group; returns once the group is
        committed and checkpointed."""
        queue = self._queues.setdefault(staged.table, _Queue(staged.table))
        done: asyncio.Future[Landed] = asyncio.get_running_loop().create_future()
        queue.pending.append((staged, arrivals, done))
        queue.nbytes += staged.nbytes
        queue.submitted += 1
        last = 0 < queue.expected <= queue.submitted
        if last or len(queue.pending) >= self.limits.slabs or queue.nbytes >= self.limits.size:
            self._flush(queue)
        elif queue.timer is None:
            queue.timer = asyncio.get_running_loop().call_later(
                self.limits.interval / 1000, self._flush, queue
            )
        return await done

    async def drain(self) -> None:
        """Commit every group now, and wait for every commit under way."""
        for queue in self._queues.values():
            self._flush(queue)
        while self._flushes:
            await asyncio.gather(*list(self._flushes), return_exceptions=True)

    def discard(self) -> None:
        """The run is abandoned: forget the groups not committed (their spools go)."""
        for queue in self._queues.values():
            if queue.timer is not None:
                queue.timer.cancel()
            for staged, _, done in queue.pending:
                _remove(staged)
                if not done.done():
                    done.cancel()
            queue.pending, queue.nbytes = [], 0

    def _flush(self, queue: _Queue) -> None:
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        if not queue.pending:
            return
        group, queue.pending, queue.nbytes = queue.pending, [], 0
        task = asyncio.ensure_future(self._commit(queue, group))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _commit(
        self, queue: _Queue, group: list[tuple[Staged, Arrivals, asyncio.Future[Landed]]]
    ) -> None:
        parts = [staged for staged, _, _ in group]
        arrivals = Arrivals()
        for _, part, _ in group:
            arrivals.merge(part)
        try:
            async with queue.lock:  # commits of a table in order; its state segment before its next commit
                windows = Windows.concat(Series(queue.table), [p.windows for p in parts])
                version, files = await asyncio.to_thread(
                    self._commit_group, queue.table, parts, windows, arrivals
                )
                async with self._state:
                    await asyncio.to_thread(
                        partial(self.store.commit, windows, mark=(queue.table, version), arrivals=arrivals)
                    )
            landed = Landed(queue.table, version, files, len(parts))
            self.commits += 1
            if self.on_commit is not None:
                self.on_commit(landed)
            for _, _, done in group:
                if not done.done():
                    done.set_result(landed)
        except BaseException as exc:
            for _, _, done in group:
                if not done.done():
                    done.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            if not isinstance(exc, Exception):
                raise
        finally:
            for staged in parts:
                _remove(staged)

    def _commit_group(
        self, name: str, parts: list[Staged], windows: Windows, arrivals: Arrivals
    ) -> tuple[int, list[str]]:
        """In a thread: the group's rows with its checkpoint, in one commit; for the raw table, the
        quality rows first (their commit runs while the raw files are written, and the raw commit
        becomes visible only after it)."""
        table = self.lake.series(Series(name))
        quality = [p for p in parts if p.quality is not None and p.quality_days is not None]
        with contextlib.ExitStack() as stack:
            ready = None
            if quality:
                rows = pa.concat_tables(
                    [p.quality for p in quality if p.quality is not None], promote_options="default"
                )
                days = Windows.concat(
                    Series.RAW, [p.quality_days for p in quality if p.quality_days is not None]
                )
                pool = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="etl-quality"))
                ready = pool.submit(
                    self.lake.quality().commit, rows, Replace.of(self.source, days, QUALITY_TIME_KEY)
                ).result
            tables = []
            for part in parts:
                if part.spool is not None and not part.files:
                    mapped = stack.enter_context(pa.memory_map(part.spool))
                    tables.append(pa.ipc.open_file(mapped).read_all())
            rows = pa.concat_tables(tables, promote_options="default") if tables else None
            files = [f for p in parts for f in p.files]
            try:
                committed = table.commit(
                    rows,
                    Replace.of(self.source, windows),
                    (self.app, self.run, windows),
                    files,
                    ready,
                    arrivals,
                )
            finally:
                if ready is not None:  # the quality commit is over whatever happened to ours
                    with contextlib.suppress(Exception):
                        ready()
        assert committed.version is not None  # a commit with a checkpoint always gets a version
        return committed.version, committed.files


def _remove(staged: Staged) -> None:
    if staged.spool is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged.spool)
