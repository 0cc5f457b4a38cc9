"""A Hive-partitioned dataset per series, written so that re-fetching any window is idempotent.

Each partition holds one file per writer (`part-{label}.{ext}`; the label is "0" unless the fleet is
sharded). Writing a slab rewrites its partitions: rows of the fetched (parameter, window) ranges are
replaced by what was fetched, every other row is kept. A retried, overlapping or resumed window thus
lands exactly once, deleted source points disappear, and each file is swapped in atomically.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.sinks.formats import FileFormat
from etl.storage import Storage
from etl.timeutil import DAY_MS
from etl.transform import SCHEMAS


@dataclass(frozen=True, slots=True)
class Replaced:
    """A (parameter, [start, end)) range whose rows the fetched data replaces."""

    param_id: int
    object_id: int
    start: int
    end: int


@dataclass
class WriteResult:
    files: list[str] = field(default_factory=list)
    rows: int = 0


def _date(day: int) -> str:
    return str(np.datetime64(day * DAY_MS, "ms").astype("datetime64[D]"))


def _ts_ms(table: pa.Table) -> np.ndarray:
    return table.column("ts").combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False)


def _in_order(table: pa.Table) -> bool:
    """Sorted by (param_id, ts)."""
    param_ids, ts = table.column("param_id").to_numpy(), _ts_ms(table)
    same = param_ids[1:] == param_ids[:-1]
    return bool(((param_ids[1:] > param_ids[:-1]) | (same & (ts[1:] >= ts[:-1]))).all())


def replaced_mask(table: pa.Table, ranges: list[Replaced]) -> np.ndarray:
    """True for rows inside one of the ranges, vectorised (a few passes when a parameter has several)."""
    mask = np.zeros(table.num_rows, dtype=bool)
    if not table.num_rows or not ranges:
        return mask
    param_ids = table.column("param_id").to_numpy()
    ts = _ts_ms(table)
    by_rank: list[dict[int, tuple[int, int]]] = []
    seen: dict[int, int] = {}
    for r in ranges:
        rank = seen.get(r.param_id, 0)
        seen[r.param_id] = rank + 1
        if rank == len(by_rank):
            by_rank.append({})
        by_rank[rank][r.param_id] = (r.start, r.end)
    for level in by_rank:
        ids = np.array(sorted(level), dtype=np.int64)
        bounds = np.array([level[i] for i in ids.tolist()], dtype=np.int64)
        pos = np.minimum(np.searchsorted(ids, param_ids), len(ids) - 1)
        hit = ids[pos] == param_ids
        mask |= hit & (ts >= bounds[pos, 0]) & (ts < bounds[pos, 1])
    return mask


class DatasetWriter:
    def __init__(
        self, storage: Storage, series: str, fmt: FileFormat, partition_by: list[str], label: str = "0"
    ) -> None:
        self.storage = storage
        self.series = series
        self.fmt = fmt
        self.partition_by = partition_by
        self.schema = SCHEMAS[series]
        self.file_name = f"part-{label}{fmt.extension}"
        self.file_schema = pa.schema([f for f in self.schema if f.name not in partition_by])

    def _partition(self, day: int, object_id: int) -> str:
        values = {"date": _date(day), "object_id": object_id}
        return "/".join([self.series, *(f"{k}={values[k]}" for k in self.partition_by)])

    def _touched(self, ranges: list[Replaced]) -> dict[str, tuple[int, int | None]]:
        by_object = "object_id" in self.partition_by
        touched = {}
        for r in ranges:
            for day in range(r.start // DAY_MS, (r.end - 1) // DAY_MS + 1):
                touched[self._partition(day, r.object_id)] = (day, r.object_id if by_object else None)
        return touched

    def _rows_of(self, table: pa.Table, days: np.ndarray, day: int, object_id: int | None) -> pa.Table:
        mask = days == day
        if object_id is not None:
            mask &= table.column("object_id").to_numpy() == object_id
        return table if mask.all() else table.filter(pa.array(mask))

    def _read(self, rel: str, object_id: int | None) -> pa.Table | None:
        data = self.storage.read(rel)
        if data is None:
            return None
        table = self.fmt.decode(data, self.file_schema, self.storage.display(rel))
        if object_id is not None:  # the column lives in the path, not the file
            table = table.add_column(0, "object_id", pa.array(np.full(table.num_rows, object_id, np.int64)))
        return table.select(self.schema.names)

    def _store(self, rel: str, table: pa.Table) -> None:
        if table.num_rows == 0:
            self.storage.remove(rel)
            return
        if not _in_order(table):  # fresh partitions usually are: the fetch builds them so
            table = table.take(pc.sort_indices(table, sort_keys=[("param_id", "ascending"), ("ts", "ascending")]))
        self.storage.write_atomic(rel, self.fmt.encode(table.select(self.file_schema.names)))

    def write(self, table: pa.Table, ranges: list[Replaced]) -> WriteResult:
        """Rewrite every partition the ranges touch; `table` holds exactly the fetched rows."""
        result = WriteResult()
        days = _ts_ms(table) // DAY_MS
        for directory, (day, object_id) in sorted(self._touched(ranges).items()):
            new_rows = self._rows_of(table, days, day, object_id)
            own = f"{directory}/{self.file_name}"
            for name in self.storage.listdir(directory):
                # Other writers' files (another shard label, or a compacted file) may hold rows of these
                # ranges too; they lose them here. Hidden names are temp files or not data.
                if name == self.file_name or name.startswith((".", "_")) or not name.endswith(self.fmt.extension):
                    continue
                rel = f"{directory}/{name}"
                other = self._read(rel, object_id)
                stale = replaced_mask(other, ranges)
                if stale.any():
                    self._store(rel, other.filter(pa.array(~stale)))
            existing = self._read(own, object_id)
            if existing is not None:
                kept = existing.filter(pa.array(~replaced_mask(existing, ranges)))
                merged = pa.concat_tables([kept, new_rows]) if new_rows.num_rows else kept
            else:
                merged = new_rows
            if merged.num_rows or existing is not None:
                self._store(own, merged)
                if merged.num_rows:
                    result.files.append(own)
            result.rows += new_rows.num_rows
        return result
