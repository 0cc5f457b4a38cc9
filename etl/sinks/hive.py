"""A Hive-partitioned dataset per series, written so that re-fetching any window is idempotent.

A slab's rows go to the files of its bucket (etl/sinks/layout.py), partition by partition, each a
streaming rewrite (etl/sinks/rewrite.py): the rows of the fetched (parameter, window) ranges are
replaced by what was fetched and every other row is kept. A retried, overlapping or resumed window
thus lands exactly once, deleted source points disappear, and each file is swapped in whole. Files of
another layout (an older version, another shard or bucket count) lose the rows of those ranges before
our file is swapped in: a reader may briefly miss such a row, never see it twice.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from etl.model import Windows
from etl.sinks.base import SlabOutcome
from etl.sinks.formats import FileFormat
from etl.sinks.layout import Layout
from etl.sinks.rewrite import FileRewrite, Observer, Ranges, concat, ts_ms
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS

_DAYS = 1 << 24  # days in 45,000 years: object * _DAYS + day names a partition uniquely


class SlabWriter:
    """Writes one slab's batches (in write order) into its bucket's files; nothing is visible before
    `finish` swaps each file in, except that partitions of objects already passed are finished early
    (the slab's later batches cannot touch them) so open files stay few."""

    def __init__(
        self, storage: Storage, fmt: FileFormat, layout: Layout, bucket: int, observer: Observer | None = None
    ) -> None:
        self.storage, self.fmt, self.layout, self.bucket = storage, fmt, layout, bucket
        self.observer = observer
        self.open: dict[str, FileRewrite] = {}
        self.fed: dict[str, list[Ranges]] = defaultdict(list)  # what each open file's feeds replaced
        self.files: list[str] = []
        self.points = 0

    def write(self, table: pa.Table, windows: Windows) -> None:
        """The rows of fetched windows (sorted in write order) and the windows (rows may be none)."""
        # Every (window, day) the windows touch, as the partition key object_id (or 0) * _DAYS + day.
        first, last = windows.start // DAY_MS, (windows.end - 1) // DAY_MS
        count = last - first + 1
        index = np.repeat(np.arange(len(windows)), count)
        day = first[index] + np.arange(len(index)) - np.repeat(np.cumsum(count) - count, count)
        objects = windows.object_id[index] if self.layout.by_object else np.zeros(len(index), np.int64)
        keys = objects * _DAYS + day
        partitions = np.unique(keys)
        row_keys = (
            self._row_keys(table) if len(partitions) > 1 else None
        )  # one partition: every row is its own
        for key in partitions.tolist():
            fed = windows[np.unique(index[keys == key])].clip(
                key % _DAYS * DAY_MS, (key % _DAYS + 1) * DAY_MS
            )
            folder = self.layout.partition(key % _DAYS, key // _DAYS)
            rows = table if row_keys is None else table.filter(pa.array(row_keys == key))
            if folder not in self.open:
                self.open[folder] = FileRewrite(
                    self.storage, self.fmt, self.layout, self.layout.file(folder, self.bucket), self.observer
                )
            ranges = Ranges.of(fed)
            self.open[folder].feed(rows, ranges)
            self.fed[folder].append(ranges)
        self.points += table.num_rows
        if self.layout.by_object and len(windows):
            passed = int(windows.object_id.max())  # later batches hold this object or later ones
            for folder in [
                f for f in self.open if int(self.layout.partition_values(f)["object_id"]) < passed
            ]:
                self._finish(folder)

    def _row_keys(self, table: pa.Table) -> np.ndarray:
        """Each row's partition, as the sort key of `_folders`: object_id (or 0) * _DAYS + day."""
        days = ts_ms(table, self.layout.time_key) // DAY_MS
        return table.column("object_id").to_numpy() * _DAYS + days if self.layout.by_object else days

    def _finish(self, folder: str) -> None:
        ranges = concat(self.fed.pop(folder))
        for name in self.storage.listdir(folder):
            key = self.layout.data_key(name)
            if (
                key is not None
                and self.layout.may_hold_ours(key)
                and f"{folder}/{name}" != self.open[folder].rel
            ):
                other = FileRewrite(self.storage, self.fmt, self.layout, f"{folder}/{name}")
                try:
                    for low, high in _chunks(ranges.param_id):
                        other.feed(self.layout.empty, ranges.between(low, high))
                    other.finish()
                except BaseException:
                    other.abort()
                    raise
        rewrite = self.open.pop(folder)  # finish() aborts it if it fails
        if rewrite.finish():
            self.files.append(rewrite.rel)

    def finish(self) -> SlabOutcome:
        """Swap every file in."""
        try:
            for folder in sorted(self.open):
                self._finish(folder)
        except BaseException:
            self.abort()
            raise
        return SlabOutcome(self.points, self.files)

    def abort(self) -> None:
        for rewrite in self.open.values():
            rewrite.abort()
        self.open.clear()


def _chunks(ids: np.ndarray, size: int = 4096) -> list[tuple[int, int]]:
    """Parameter-id bounds of successive groups of ranges (one feed each, so a cleaning stays bounded)."""
    unique = np.unique(ids)
    return [
        (int(unique[i]), int(unique[min(i + size, len(unique)) - 1])) for i in range(0, len(unique), size)
    ]


__all__ = ["SlabWriter"]
