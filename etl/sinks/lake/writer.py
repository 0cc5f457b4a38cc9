"""A slab into a lake table in one commit that carries its checkpoint; checkpoints recovered from the
tables; dimension snapshots as tables.

The slab's batches are spooled to a local Arrow IPC file (memory stays bounded while it is fetched) and
committed when the slab ends, memory-mapped: one transaction replaces the slab's (parameter, window)
ranges and names the slab's windows (etl/sinks/lake/common.py). For a raw slab the quality rows of its
parameter-days are committed first, to the quality table: a crash between the two commits leaves the
slab unchecked, so the next run redoes both (the quality rows are replaced, never doubled).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.model import QUALITY_TIME_KEY, SCHEMAS, Series, Windows
from etl.sinks.base import QualityRows, SlabOutcome
from etl.sinks.lake.common import LakeTable, Replace, with_date
from etl.sinks.layout import Layout
from etl.sinks.rewrite import Ranges
from etl.state import Coverage, StateStore
from etl.timeutil import DAY_MS

log = logging.getLogger(__name__)


class LakeSlabWriter:
    """The SlabSink of a lake table: `write` spools, `finish` commits, `abort` forgets."""

    def __init__(
        self,
        table: LakeTable,
        layout: Layout,
        checkpoint: tuple[str, str],
        quality: tuple[LakeTable, QualityRows] | None = None,
    ) -> None:
        self.table, self.layout = table, layout
        self.app, self.run = checkpoint
        self.quality = quality
        self.parts: list[Windows] = []
        self.points = 0
        self._path: str | None = None
        self._sink: pa.ipc.RecordBatchFileWriter | None = None
        self._schema: pa.Schema | None = None

    def write(self, table: pa.Table, windows: Windows) -> None:
        rows = with_date(table, self.layout.time_key)
        if self._sink is None:
            fd, self._path = tempfile.mkstemp(prefix="etl-lake-", suffix=".arrow")
            os.close(fd)
            self._schema = rows.schema
            self._sink = pa.ipc.new_file(self._path, rows.schema)
        self._sink.write_table(rows.cast(self._schema))
        self.parts.append(windows)
        self.points += table.num_rows

    def finish(self) -> SlabOutcome:
        try:
            if self._sink is None or self._path is None:
                return SlabOutcome()
            windows = Windows.concat(self.parts[0].series, self.parts)
            self._sink.close()
            with pa.memory_map(self._path) as mapped:
                rows = pa.ipc.open_file(mapped).read_all()
                quality = self._commit_quality(rows, windows) if self.quality is not None else None
                version = self.table.replace(rows, Replace.of(windows), (self.app, self.run, windows))
            assert version is not None  # a commit with a checkpoint always gets a version
            return SlabOutcome(
                self.points,
                [self.table.name],
                quality.rows if quality else 0,
                quality.lowest_completeness if quality else None,
                (self.table.name, version),
            )
        finally:
            self.abort()

    def _commit_quality(self, rows: pa.Table, windows: Windows) -> QualityRows:
        """The quality rows of the slab's parameter-days, from every raw row of each: the fetched ones,
        and those the table keeps outside the windows (read only when a window misses part of its day)."""
        assert self.quality is not None
        table, tracker = self.quality
        ranges = Ranges.of(windows)
        day = int(windows.start[0]) // DAY_MS * DAY_MS
        whole = (windows.start == day) & (windows.end == day + DAY_MS)
        partial = np.setdiff1d(windows.param_id, windows.param_id[whole]).tolist()
        schema = SCHEMAS[Series.RAW]
        parts = [_as_schema(rows, schema)]
        if partial:
            kept = _as_schema(self.table.read(partial, day, day + DAY_MS), schema)
            parts.append(kept.filter(pa.array(~ranges.mask(kept))))
        every = pa.concat_tables(parts)
        every = every.take(pc.sort_indices(every, [("param_id", "ascending"), ("ts", "ascending")]))
        tracker(every, ranges)
        result, days = tracker.result(self.layout.by_object)
        if len(days):
            table.replace(with_date(result, QUALITY_TIME_KEY), Replace.of(days, QUALITY_TIME_KEY))
        return tracker

    def abort(self) -> None:
        if self._sink is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._sink.close()
            self._sink = None
        if self._path is not None:
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
        if table.latest(app) <= mark:
            continue
        for checkpoint in table.history(app, mark):
            store.commit(checkpoint.windows, (table.name, checkpoint.version))
            coverage.add(checkpoint.windows)
            recovered += 1
    if recovered:
        log.warning(
            "recovered %d slab checkpoint(s) from the tables' commits (a run stopped between a table "
            "commit and its state entry)",
            recovered,
        )
    return recovered


def write_dimensions(tables: dict, lake_table, source: str) -> list[str]:
    """Each reference table's snapshot replaces this source's rows of its lake table, in one commit."""
    written = []
    for name, rows in tables.items():
        try:
            target = lake_table(name)
            target.replace(rows.reader(source), Replace(source=source))
            written.append(target.name)
        finally:
            rows.close()
    return written
