"""The output's rows of a group of windows, as readers see them: a file dataset's files that may hold
them (the bucket's file of each partition, and files of another layout), or a lake table's current
snapshot, filtered by source, parameter and time. A group is one series' span of one bucket, at most
`extract.batch_windows` windows: what is read is bounded by the configuration, whatever the window."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.model import TS, Series, Windows
from etl.sinks.layout import Layout
from etl.sinks.output import Output
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


def _rows(table: pa.Table, series: Series) -> Rows:
    columns = series.value_columns
    if not table.num_rows:
        empty = np.empty(0, np.int64)
        return Rows(empty, empty, {c: np.empty(0, np.float64) for c in columns})
    ts = pc.cast(table.column("ts"), TS).cast(pa.int64())  # lake tables hold microseconds
    pids = table.column("param_id").cast(pa.int64())
    order = np.lexsort((ts.to_numpy(), pids.to_numpy()))  # stable: a row twice stays twice, in order
    return Rows(
        pids.to_numpy()[order],
        ts.to_numpy()[order],
        {c: table.column(c).cast(pa.float64()).to_numpy(zero_copy_only=False)[order] for c in columns},
    )


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
        else:
            table = self._files(self.output.layout(series, self.buckets), windows, ids, start, end)
        return _rows(table, series)

    def _files(self, layout: Layout, windows: Windows, ids: np.ndarray, start: int, end: int) -> pa.Table:
        storage, fmt = self.output.data, self.output.fmt
        objects = np.unique(windows.object_id).tolist() if layout.by_object else [0]
        buckets = {layout.bucket(int(p)) for p in ids.tolist()}
        wanted = pa.array(ids, pa.int64())
        parts = [layout.empty]
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
                            ts = pc.cast(batch.column("ts"), pa.int64())
                            keep = pc.and_(
                                pc.and_(
                                    pc.is_in(batch.column("param_id"), wanted),
                                    pc.equal(batch.column("source"), self.source),
                                ),
                                pc.and_(pc.greater_equal(ts, start), pc.less(ts, end)),
                            )
                            parts.append(batch.filter(keep))
                    finally:
                        version.close()
        return pa.concat_tables(parts)
