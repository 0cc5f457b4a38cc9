"""A raw slab's quality rows, made while its files are rewritten and written after them.

Each raw file's observer (`QualityTracker`, see etl/sinks/rewrite.py) is handed every row of the fed
parameters in that file, the rows kept plus the new ones, so a run that fetches only the last hour still
sees the whole day; it turns them into one quality row per parameter-day at once (etl/quality/rows.py).
`QualitySlabWriter.finish` writes those rows into the quality dataset with the same streaming rewrite as
the series, after the raw files and before the coordinator checkpoints the slab: a slab redone after a
crash replaces them again, so the dataset holds exactly one row per (parameter, day). It holds a slab's
parameters' rows at most.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.model import PARAM_KINDS, QUALITY_SCHEMA, QUALITY_TIME_KEY, Series, Windows, batches
from etl.quality.rows import Known, day_rows, late_figures
from etl.sinks.base import SlabOutcome
from etl.sinks.formats import FileFormat
from etl.sinks.hive import SlabWriter
from etl.sinks.layout import Layout
from etl.sinks.rewrite import Ranges, param_ids, ts_ms
from etl.state.arrivals import LATE_FOLDS, Rows
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS

COMPACT_PARTS = 32


class QualityTracker:
    """The observer of a raw slab's file rewrites: the quality rows of the parameters they write."""

    def __init__(
        self, windows: Windows, source: str, window: tuple[int, int], known: Known | None = None
    ) -> None:
        order = np.argsort(windows.param_id, kind="stable")
        self._ids, self._objects, self._kinds = (
            windows.param_id[order],
            windows.object_id[order],
            windows.kind[order],
        )
        self.source = source
        self.window = window
        self.known = known
        self.parts: list[pa.Table] = []  # compacted, then the latest small ones
        self._small = 0
        self._late: list[Rows] = []  # late points fetched now, per (parameter, day)

    def __call__(self, rows: pa.Table, ranges: Ranges) -> None:
        if len(ranges):
            ids = np.unique(ranges.param_id)
            new_points, new_ms, points, ms = late_figures(rows, ranges, ids, self.known)
            late = new_points > 0
            if late.any():
                day = int(ranges.start[0]) // DAY_MS * DAY_MS
                self._late.append(
                    Rows(ids[late], np.full(int(late.sum()), day), (new_points[late], new_ms[late]))
                )
            params = self._params(ranges.param_id)
            self.parts.append(day_rows(rows, ranges, params, self.source, self.window, (points, ms)))
            self._small += 1
            if self._small == COMPACT_PARTS:  # one table, not dozens of small ones with their own buffers
                self.parts[-COMPACT_PARTS:] = [pa.concat_tables(self.parts[-COMPACT_PARTS:]).combine_chunks()]
                self._small = 0

    def _params(self, ids: np.ndarray) -> dict[int, tuple[int, str]]:
        """Object and kind of these parameters (a file's, not the whole slab's)."""
        ids = np.unique(ids)
        at = np.minimum(np.searchsorted(self._ids, ids), max(len(self._ids) - 1, 0))
        known = self._ids[at] == ids if len(self._ids) else np.zeros(len(ids), bool)
        return {
            p: (o, PARAM_KINDS[k].value)
            for p, o, k in zip(
                ids[known].tolist(),
                self._objects[at][known].tolist(),
                self._kinds[at][known].tolist(),
                strict=True,
            )
        }

    def result(self, by_object: bool) -> tuple[pa.Table, Windows]:
        """The rows in write order, and the (parameter, day) windows they replace."""
        if not self.parts:
            return QUALITY_SCHEMA.empty_table(), Windows.of(Series.RAW, ())
        table = pa.concat_tables(self.parts)
        keys = [("object_id", "ascending")] if by_object else []
        table = table.sort_by([*keys, ("param_id", "ascending"), (QUALITY_TIME_KEY, "ascending")])
        days = ts_ms(table, QUALITY_TIME_KEY)
        kinds = pc.index_in(table.column("kind"), pa.array([k.value for k in PARAM_KINDS])).to_numpy(
            zero_copy_only=False
        )
        return table, Windows(
            Series.RAW, param_ids(table), table.column("object_id").to_numpy(), kinds, days, days + DAY_MS
        )

    @property
    def rows(self) -> int:
        return sum(p.num_rows for p in self.parts)

    def late(self) -> Rows:
        """The late points fetched now and their longest delay, per (parameter, day)."""
        out = Rows.empty(2)
        for rows in self._late:
            out = out.merged(rows, LATE_FOLDS)
        return out

    @property
    def lowest_completeness(self) -> float | None:
        lows = [
            float(np.nanmin(c))
            for p in self.parts
            if len(c := p.column("completeness").to_numpy(zero_copy_only=False)) and not np.isnan(c).all()
        ]
        return min(lows) if lows else None


QUALITY_BATCH = 1024  # quality rows handed to the writer at a time


class QualitySlabWriter(SlabWriter):
    """A raw slab's writer that also writes the quality rows of the parameters it wrote, once its own
    files are swapped in (the coordinator checkpoints the slab after both)."""

    def __init__(
        self,
        storage: Storage,
        fmt: FileFormat,
        layout: Layout,
        bucket: int,
        quality: Layout,
        tracker: QualityTracker,
    ) -> None:
        super().__init__(storage, fmt, layout, bucket, tracker)
        self.tracker = tracker
        self.quality = SlabWriter(storage, fmt, quality, bucket)

    def finish(self) -> SlabOutcome:
        outcome = super().finish()
        try:
            table, windows = self.tracker.result(self.quality.layout.by_object)
            for lo, hi in batches(windows.param_id, QUALITY_BATCH):  # a slab's rows, a bounded part at a time
                self.quality.write(table.slice(lo, hi - lo), windows[lo:hi])
            self.quality.finish()
        except BaseException:
            self.quality.abort()
            raise
        return SlabOutcome(
            outcome.points,
            outcome.files,
            self.tracker.rows,
            self.tracker.lowest_completeness,
            late=self.tracker.late(),
        )

    def abort(self) -> None:
        super().abort()
        self.quality.abort()
