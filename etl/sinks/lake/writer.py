"""A slab's rows staged for a lake table; checkpoints recovered from the tables; dimension snapshots.

The slab's batches are spooled to a local Arrow IPC file (memory stays bounded while it is fetched).
When the slab ends, `finish` makes a raw slab's quality rows and hands everything to the run's
committer (etl/sinks/lake/committer.py), which commits it with other slabs of the same table in one
commit carrying their windows; the slab is checkpointed after that commit. On a Dask worker (`remote`)
`finish` writes the rows as data files into the table instead, and the coordinator commits them.

A raw slab's quality rows are made from every raw row of each of its parameter-days: the fetched ones,
and, only when a window misses part of its day, those the table keeps (read from one snapshot per run:
a run's slabs never share a parameter-day). The committer commits them to the quality table before
the raw rows: a crash between the two commits leaves the slabs unchecked, so the next run redoes both
(the quality rows are replaced, never doubled).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.model import QUALITY_TIME_KEY, SCHEMAS, Series, Windows
from etl.sinks.base import QualityRows, SlabOutcome, Staged
from etl.sinks.lake.common import LakeTable, Replace, with_date
from etl.sinks.layout import Layout
from etl.sinks.rewrite import Ranges, ts_ms
from etl.state import Coverage, StateStore
from etl.storage.spools import spool_file
from etl.timeutil import DAY_MS

log = logging.getLogger(__name__)

# A slab spooled this large, into partitions that hold nothing it replaces (a backfill, a new day), has
# its data files written when it ends; smaller ones are merged into their group's files by the commit.
EAGER_BYTES = 256 * 2**10


class LakeSlabWriter:
    """The SlabSink of a lake table: `write` spools, `finish` stages, `abort` forgets."""

    def __init__(
        self,
        table: LakeTable,
        layout: Layout,
        quality: tuple[LakeTable, QualityRows] | None = None,
        remote: bool = False,
    ) -> None:
        self.table, self.layout = table, layout
        self.quality = quality
        self.remote = remote  # a Dask worker: data files written into the table, not a local spool
        self.parts: list[Windows] = []
        self.points = 0
        self._path: str | None = None
        self._sink: pa.ipc.RecordBatchFileWriter | None = None
        self._schema: pa.Schema | None = None

    def write(self, table: pa.Table, windows: Windows) -> None:
        rows = with_date(table, self.layout.time_key)
        if self._sink is None:
            self._path = spool_file("lake-", ".arrow")
            self._schema = rows.schema
            self._sink = pa.ipc.new_file(self._path, rows.schema)
        self._sink.write_table(rows.cast(self._schema))
        self.parts.append(windows)
        self.points += table.num_rows

    def finish(self) -> SlabOutcome:
        if self._sink is None or self._path is None:
            self.abort()
            return SlabOutcome()
        try:
            windows = Windows.concat(self.parts[0].series, self.parts)
            self._sink.close()
            self._sink = None
            quality, days = None, None
            if self.quality is not None:
                with pa.memory_map(self._path) as mapped:
                    quality, days = self._quality(pa.ipc.open_file(mapped).read_all(), windows)
            files: tuple[Any, ...] = ()  # the format's records of its data files (LakeTable.write_files)
            nbytes = os.path.getsize(self._path)
            replace = Replace.of(self.layout.source, windows)
            if self.remote or (nbytes >= EAGER_BYTES and self.table.holds_none_of(replace)):
                with pa.memory_map(self._path) as mapped:
                    rows = pa.ipc.open_file(mapped).read_all()
                    if not self.remote:  # a Dask run's coordinator made the tables before
                        self.table.prepare(rows.schema)
                    files = tuple(self.table.write_files(rows))
                self.abort()
            staged = Staged(
                self.table.name,
                windows,
                self.points,
                spool=self._path,
                files=files,
                nbytes=nbytes,
                quality=quality,
                quality_days=days,
            )
            self._path = None  # the committer's now
            tracker = self.quality[1] if self.quality is not None else None
            return SlabOutcome(
                self.points,
                [],
                tracker.rows if tracker else 0,
                tracker.lowest_completeness if tracker else None,
                staged,
                tracker.late() if tracker else None,
            )
        except BaseException:
            self.abort()
            raise

    def _quality(self, rows: pa.Table, windows: Windows) -> tuple[pa.Table, Windows]:
        """The quality rows of the slab's parameter-days, from every raw row of each: the fetched ones,
        and those of this source the table keeps outside the windows (read only when a window misses part
        of its day). A raw slab spans one day, or two when its tails cross midnight: a day at a time."""
        assert self.quality is not None
        _, tracker = self.quality
        schema = SCHEMAS[Series.RAW]
        rows = _as_schema(rows, schema)
        stamps = ts_ms(rows, "ts")
        for day in range(int(windows.start.min()) // DAY_MS * DAY_MS, int(windows.end.max()), DAY_MS):
            touching = (windows.start < day + DAY_MS) & (windows.end > day)
            if not touching.any():
                continue
            mine = windows[touching].clip(day, day + DAY_MS)
            ranges = Ranges.of(mine)
            whole = (mine.start == day) & (mine.end == day + DAY_MS)
            partial = np.setdiff1d(mine.param_id, mine.param_id[whole]).tolist()
            parts = [rows.filter(pa.array((stamps >= day) & (stamps < day + DAY_MS)))]
            if partial:
                kept = _as_schema(self.table.read(self.layout.source, partial, day, day + DAY_MS), schema)
                parts.append(kept.filter(pa.array(~ranges.mask(kept))))
            every = pa.concat_tables(parts)
            every = every.take(pc.sort_indices(every, [("param_id", "ascending"), ("ts", "ascending")]))
            tracker(every, ranges)
        result, days = tracker.result(self.layout.by_object)
        return with_date(result, QUALITY_TIME_KEY), days

    def abort(self) -> None:
        if self._sink is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._sink.close()
            self._sink = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            self._path = None


def _as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A table read back from a lake (timestamps in us, a date column) in the output schema."""
    if not table.num_rows:
        return schema.empty_table()
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema], schema=schema)


def recover(tables: list[LakeTable], store: StateStore, coverage: Coverage, app: str) -> int:
    """Checkpoints that rode in table commits the state log does not hold yet (a run killed between the
    two), written to the log and added to `coverage`; the number recovered. Runs under the run lock."""
    recovered = 0
    for table in tables:
        if not table.exists():
            continue
        mark = store.marks.get(table.name, 0)
        latest = table.latest(app)
        if latest <= mark:
            continue
        found = table.history(app, mark)
        for checkpoint in found:
            store.commit(
                checkpoint.windows, mark=(table.name, checkpoint.version), arrivals=checkpoint.arrivals
            )
            coverage.add(checkpoint.windows)
            recovered += 1
        missing = latest - mark - len(found)
        if missing > 0:
            store.skip(table.name, latest)
            log.warning(
                "%s: %d commit(s) of ours are older than the table's kept history; their windows will "
                "be fetched again (and replace what they wrote)",
                table.name,
                missing,
            )
    if recovered:
        log.warning(
            "recovered %d commit checkpoint(s) from the tables (a run stopped between a table commit "
            "and its state entry)",
            recovered,
        )
    return recovered


class Snapshot(Protocol):
    """A reference table's rows, spooled (etl.pipeline.dimensions.Rows)."""

    def reader(self, source: str) -> pa.RecordBatchReader: ...

    def close(self) -> None: ...


def write_dimensions(
    tables: Mapping[str, Snapshot],
    lake_table: Callable[[str], LakeTable],
    source: str,
    transform: Callable[[pa.Table], pa.Table] | None = None,
) -> list[str]:
    """Each reference table's snapshot replaces this source's rows of its lake table, in one commit
    (none when they are the same rows); `transform`: what the format needs done to the rows first."""
    written = []
    for name, rows in tables.items():
        try:
            target = lake_table(name)
            table = rows.reader(source).read_all()
            target.snapshot(transform(table) if transform is not None else table, source)
            written.append(target.name)
        finally:
            rows.close()
    return written
