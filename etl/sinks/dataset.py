"""A Hive-partitioned dataset per series, written so that re-fetching any window is idempotent.

Each partition holds one file per writer (`part-{label}.{ext}`; the label is "0" unless the fleet is
sharded: `s{I}of{N}`). Writing a slab rewrites its partitions: rows of the fetched (parameter, window)
ranges are replaced by what was fetched, every other row is kept. A retried, overlapping or resumed
window thus lands exactly once, deleted source points disappear, and each file is swapped in whole
(rename locally, one PUT on object stores). Every rewrite is a Storage.update, so writers that share a
file (a shard cleaning a file left by another shard layout) never lose each other's changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.sinks.formats import FileFormat
from etl.storage import KEEP, Storage
from etl.timeutil import DAY_MS
from etl.transform import SCHEMAS


@dataclass(frozen=True, slots=True)
class Replaced:
    """A (parameter, [start, end)) range whose rows the fetched data replaces."""

    param_id: int
    object_id: int
    start: int
    end: int


_SHARD_LABEL = re.compile(r"^part-s\d+of(\d+)\.")


def shard_label(shard: tuple[int, int] | None) -> str:
    """The writer label of a shard's files (part-{label}.ext): "sIofN", or "0" unsharded."""
    return f"s{shard[0]}of{shard[1]}" if shard else "0"


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


def _unique(table: pa.Table) -> pa.Table:
    """One row per (param_id, ts)."""
    table = table.sort_by([("param_id", "ascending"), ("ts", "ascending")])
    if table.num_rows < 2:
        return table
    param_ids, ts = table.column("param_id").to_numpy(), _ts_ms(table)
    first = np.r_[True, (param_ids[1:] != param_ids[:-1]) | (ts[1:] != ts[:-1])]
    return table if first.all() else table.filter(pa.array(first))


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

    def _is_data(self, name: str) -> bool:
        """Hidden names (temp files, folder locks, markers) are not data, as for every reader."""
        return not name.startswith((".", "_")) and name.endswith(self.fmt.extension)

    def _data_files(self, directory: str) -> list[str]:
        return [name for name in self.storage.listdir(directory) if self._is_data(name)]

    def partitions(self) -> list[str]:
        """Every partition folder of this series that holds a data file."""
        folders = (rel.rsplit("/", 1) for rel in self.storage.find(self.series))
        return sorted({folder for folder, name in folders if self._is_data(name)})

    def compact(self, directory: str) -> int:
        """Merge every data file of one partition into this writer's file; returns how many files went.

        The merged file is swapped in before the others are removed: a reader listing the folder in
        between may count rows twice for a moment, never a partial file or a missing row. A compaction
        killed there leaves those duplicates until the next one, which drops them (rows are unique on
        (param_id, ts) by construction).
        """
        names = self._data_files(directory)
        if len(names) < 2:
            return 0
        match = re.search(r"(?:^|/)object_id=(-?\d+)(?:/|$)", directory)
        object_id = int(match.group(1)) if match and "object_id" in self.partition_by else None
        tables = []
        for name in names:
            rel = f"{directory}/{name}"
            if (data := self.storage.read(rel)) is not None:
                tables.append(self._decode(data, rel, object_id))
        body = self._encode(_unique(pa.concat_tables(tables)))
        own = f"{directory}/{self.file_name}"
        self.storage.write_atomic(own, body) if body is not None else self.storage.remove(own)
        gone = [name for name in names if name != self.file_name]
        for name in gone:
            self.storage.remove(f"{directory}/{name}")
        return len(gone)

    def _rows_of(self, table: pa.Table, days: np.ndarray, day: int, object_id: int | None) -> pa.Table:
        mask = days == day
        if object_id is not None:
            mask &= table.column("object_id").to_numpy() == object_id
        return table if mask.all() else table.filter(pa.array(mask))

    def _decode(self, data: bytes, rel: str, object_id: int | None) -> pa.Table:
        table = self.fmt.decode(data, self.file_schema, self.storage.display(rel))
        if object_id is not None:  # the column lives in the path, not the file
            table = table.add_column(0, "object_id", pa.array(np.full(table.num_rows, object_id, np.int64)))
        return table.select(self.schema.names)

    def _encode(self, table: pa.Table) -> bytes | None:
        """File bytes, sorted by (param_id, ts); None for no rows (the file is removed)."""
        if table.num_rows == 0:
            return None
        if not _in_order(table):  # fresh partitions usually are: the fetch builds them so
            table = table.take(pc.sort_indices(table, sort_keys=[("param_id", "ascending"), ("ts", "ascending")]))
        return self.fmt.encode(table.select(self.file_schema.names))

    def _may_hold_ours(self, name: str) -> bool:
        """Could another writer's file hold rows of our ranges? Not if it is hidden (temp files, locks),
        not data, or written by a shard of our own layout: those hold other parameters by construction."""
        if name == self.file_name or not self._is_data(name):
            return False
        ours, theirs = _SHARD_LABEL.match(self.file_name), _SHARD_LABEL.match(name)
        return not (ours and theirs and ours.group(1) == theirs.group(1))

    def write(self, table: pa.Table, ranges: list[Replaced]) -> list[str]:
        """Rewrite every partition the ranges touch; `table` holds exactly the fetched rows. Returns
        the files that hold rows now."""
        files = []
        days = _ts_ms(table) // DAY_MS
        for directory, (day, object_id) in sorted(self._touched(ranges).items()):
            new_rows = self._rows_of(table, days, day, object_id)
            for name in self.storage.listdir(directory):
                # Files of another writer label (an earlier shard layout, an unsharded run) may hold rows
                # of these ranges too; they lose them here.
                if self._may_hold_ours(name):
                    rel = f"{directory}/{name}"
                    self.storage.update(rel, partial(self._without, rel=rel, object_id=object_id, ranges=ranges))
            own = f"{directory}/{self.file_name}"
            merge = partial(self._merged, rel=own, object_id=object_id, ranges=ranges, new_rows=new_rows)
            written = self.storage.update(own, merge)
            if written is not None and written is not KEEP:
                files.append(own)
        return files

    def _without(self, data: bytes | None, rel: str, object_id: int | None, ranges: list[Replaced]):
        if data is None:
            return KEEP
        other = self._decode(data, rel, object_id)
        stale = replaced_mask(other, ranges)
        return self._encode(other.filter(pa.array(~stale))) if stale.any() else KEEP

    def _merged(self, data: bytes | None, rel: str, object_id: int | None, ranges: list[Replaced],
                new_rows: pa.Table):
        if data is None:
            return self._encode(new_rows) if new_rows.num_rows else KEEP
        existing = self._decode(data, rel, object_id)
        kept = existing.filter(pa.array(~replaced_mask(existing, ranges)))
        return self._encode(pa.concat_tables([kept, new_rows]) if new_rows.num_rows else kept)
