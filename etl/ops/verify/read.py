"""The output's rows of a group of windows, as readers see them: a file dataset's files that may hold
them (the bucket's file of each partition, and files of another layout), or a lake table's current
snapshot, filtered by source, parameter and time. A group is one series' span of one bucket, at most
`extract.batch_windows` windows: what is read is bounded by the configuration, whatever the window."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.model import Series, Windows
from etl.sinks.layout import Layout
from etl.sinks.output import Output
from etl.sinks.rewrite import param_ids, ts_ms
from etl.timeutil import DAY_MS


@dataclass(frozen=True)
class Rows:
    """Rows sorted by (param_id, ts): ts in epoch ms, the series' value columns as float64."""

    param_id: np.ndarray
    ts: np.ndarray
    values: dict[str, np.ndarray]

    def of(self, param_id: int, start: int, end: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One parameter's rows with ts in [start, end)."""
        lo, hi = np.searchsorted(self.param_id, [param_id, param_id + 1])
        a, b = np.searchsorted(self.ts[lo:hi], [start, end]) + lo
        return self.ts[a:b], {c: v[a:b] for c, v in self.values.items()}


def _ms(column: pa.ChunkedArray) -> np.ndarray:
    """A timestamp column as epoch ms (lake tables hold microseconds)."""
    ticks = column.combine_chunks().view(pa.int64()).to_numpy(zero_copy_only=False)
    unit = column.type.unit
    ms: np.ndarray = ticks * 1000 if unit == "s" else ticks // {"ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    return ms


def _rows(parts: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]], series: Series) -> Rows:
    """Rows from (param_id, ts, values) parts, sorted by (param_id, ts); a row twice stays twice."""
    columns = series.value_columns
    if not parts:
        empty = np.empty(0, np.int64)
        return Rows(empty, empty, {c: np.empty(0, np.float64) for c in columns})
    pids = np.concatenate([p[0] for p in parts])
    ts = np.concatenate([p[1] for p in parts])
    order = np.lexsort((ts, pids))
    values = {c: np.concatenate([p[2][c] for p in parts])[order] for c in columns}
    return Rows(pids[order], ts[order], values)


def _picked(
    table: pa.Table, series: Series, pids: np.ndarray, ts: np.ndarray, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The kept rows' columns, copied out of the table (numpy: no Arrow compute kernels to load)."""
    at = np.flatnonzero(keep)
    values = {
        c: table.column(c).combine_chunks().to_numpy(zero_copy_only=False).astype(np.float64)[at]
        for c in series.value_columns
    }
    return pids[at], ts[at], values


class OutputReader:
    """Reads the output of a config's source (and shard) a group of windows at a time."""

    def __init__(self, output: Output, buckets: int) -> None:
        self.output, self.buckets = output, buckets
        self.source = output.config.source.name

    def rows(self, windows: Windows) -> Rows:
        """The output's rows of the windows' parameters within their span (windows of one series)."""
        series = windows.series
        ids = np.unique(windows.param_id)
        start, end = int(windows.start.min()), int(windows.end.max())
        if self.output.lake is not None:
            table = self.output.lake.series(series).read(self.source, ids.tolist(), start, end)
            if not table.num_rows:
                return _rows([], series)
            pids = table.column("param_id").combine_chunks().to_numpy(zero_copy_only=False)
            return _rows(
                [_picked(table, series, pids, _ms(table.column("ts")), np.ones(len(pids), bool))], series
            )
        return _rows(self._files(self.output.layout(series, self.buckets), windows, ids, start, end), series)

    def _files(
        self, layout: Layout, windows: Windows, ids: np.ndarray, start: int, end: int
    ) -> list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
        storage, fmt = self.output.data, self.output.fmt
        objects = np.unique(windows.object_id).tolist() if layout.by_object else [0]
        buckets = {layout.bucket(int(p)) for p in ids.tolist()}
        parts = []
        for day in range(start // DAY_MS, (end - 1) // DAY_MS + 1):
            for object_id in objects:
                folder = layout.partition(day, object_id)
                mine = {layout.file(folder, b) for b in buckets}
                for name in storage.listdir(folder):
                    rel = f"{folder}/{name}"
                    key = layout.data_key(name)
                    if key is None or not (rel in mine or layout.may_hold_ours(key)):
                        continue
                    version = storage.open_version(rel)
                    try:
                        if version.handle is None:  # removed since it was listed
                            continue
                        for batch in fmt.batches(version.handle, layout.schema, storage.display(rel), ids):
                            batch = layout.fill_partition_columns(batch, folder)
                            pids, ts = param_ids(batch), ts_ms(batch)
                            keep = np.isin(pids, ids) & (ts >= start) & (ts < end)
                            if key.source != self.source:  # a file of an older version: whose rows?
                                sources = batch.column("source").to_numpy(zero_copy_only=False)
                                keep &= sources == self.source
                            if keep.any():
                                parts.append(_picked(batch, layout.series, pids, ts, keep))
                    finally:
                        version.close()
        return parts
