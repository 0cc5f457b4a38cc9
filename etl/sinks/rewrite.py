"""One data file rewritten as a stream, so no step holds a whole file.

A file's rows are sorted by (param_id, time key): `ts` for the series, the layout's `time_key` for
other datasets (the quality dataset's `day`). A rewrite reads the current version batch by batch, drops
the rows inside the replaced (parameter, [start, end)) ranges, merges in the new rows (fed in
ascending parameter order, as a slab produces them) and writes the result aside; `finish` swaps it
in if nobody changed the file meanwhile, and otherwise redoes the merge on the new version with our
rows. It holds one batch of the old file, one feed, and one parameter's tail at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.errors import DataError, LostRace
from etl.model import Windows
from etl.sinks.formats import FileFormat
from etl.sinks.layout import Layout
from etl.storage.atomic import Storage
from etl.support import optimistic

log = logging.getLogger(__name__)

Observer = Callable[[pa.Table, "Ranges"], None]


def ts_ms(table: pa.Table, key: str = "ts") -> np.ndarray:
    """The time key column (`ts` for the series) as epoch ms (read-only: it may be the table's buffer)."""
    column = table.column(key)
    if column.num_chunks == 1 and not column.null_count:
        # A view of the column's buffer: combine_chunks and cast would each copy it, and every copy
        # of a large column is a fresh mapping to fault in (etl/support/allocator.py).
        return cast(np.ndarray, column.chunk(0).view(pa.int64()).to_numpy())
    return cast(np.ndarray, column.combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False))


def param_ids(table: pa.Table) -> np.ndarray:
    """The param_id column (read-only: it may be the table's buffer)."""
    column = table.column("param_id")
    if column.num_chunks == 1 and not column.null_count:
        return cast(np.ndarray, column.chunk(0).to_numpy())
    return cast(np.ndarray, column.combine_chunks().to_numpy(zero_copy_only=False))


@dataclass(frozen=True)
class Ranges:
    """(parameter, [start, end)) ranges whose rows a write replaces, sorted by parameter; a parameter
    may have several (raw windows shorter than a day)."""

    param_id: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def of(cls, windows: Windows) -> Ranges:
        order = np.lexsort((windows.end, windows.start, windows.param_id))
        return cls(windows.param_id[order], windows.start[order], windows.end[order])

    @classmethod
    def empty(cls) -> Ranges:
        return cls(*(np.empty(0, np.int64) for _ in range(3)))

    def __len__(self) -> int:
        return len(self.param_id)

    def between(self, low: float, high: float) -> Ranges:
        """The ranges of parameters in [low, high]."""
        lo = int(np.searchsorted(self.param_id, low, side="left"))
        hi = int(np.searchsorted(self.param_id, high, side="right"))
        return Ranges(self.param_id[lo:hi], self.start[lo:hi], self.end[lo:hi])

    def mask(self, table: pa.Table, key: str = "ts") -> np.ndarray:
        """True for rows inside one of the ranges (a few vectorised passes when parameters have several)."""
        mask = np.zeros(table.num_rows, dtype=bool)
        if not table.num_rows or not len(self):
            return mask
        pids, ts = param_ids(table), ts_ms(table, key)
        ordered = bool((pids[1:] >= pids[:-1]).all())
        # Rank k holds each parameter's k-th range: within a rank, ids are unique and sorted.
        first = np.r_[True, self.param_id[1:] != self.param_id[:-1]]
        group_start = np.maximum.accumulate(np.where(first, np.arange(len(self)), 0))
        rank = np.arange(len(self)) - group_start
        for k in range(int(rank.max()) + 1):
            level = rank == k
            ids, starts, ends = self.param_id[level], self.start[level], self.end[level]
            if ordered:
                mask |= _inside(pids, ts, ids, starts, ends)
                continue
            pos = np.minimum(np.searchsorted(ids, pids), len(ids) - 1)
            mask |= (ids[pos] == pids) & (ts >= starts[pos]) & (ts < ends[pos])
        return mask


_NEVER = (np.iinfo(np.int64).max, np.iinfo(np.int64).min)  # bounds no stamp is within


def _inside(
    pids: np.ndarray, ts: np.ndarray, ids: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """`Ranges.mask` of one range per parameter (ids unique and sorted) over rows sorted by parameter:
    each parameter's rows are one run, so every row's bounds are a run-length expansion, without the
    per-row search and gathers (each a fresh array the size of the table)."""
    lo, hi = np.searchsorted(pids, ids, side="left"), np.searchsorted(pids, ids, side="right")
    # Runs: rows before the first parameter's, its rows, rows up to the next one's, ..., rows after the last.
    lengths = np.diff(np.r_[0, np.column_stack((lo, hi)).ravel(), len(pids)])
    low = np.column_stack((np.full(len(ids), _NEVER[0]), starts)).ravel()
    high = np.column_stack((np.full(len(ids), _NEVER[1]), ends)).ravel()
    inside = ts >= np.repeat(np.r_[low, _NEVER[0]], lengths)
    inside &= ts < np.repeat(np.r_[high, _NEVER[1]], lengths)
    return inside


def _merge(old: pa.Table, new: pa.Table, key: str = "ts") -> pa.Table:
    """Both sorted, in one order; where both hold a (param_id, key), the new row (sort_indices is stable)."""
    table = pa.concat_tables([old, new])
    table = table.take(pc.sort_indices(table, sort_keys=[("param_id", "ascending"), (key, "ascending")]))
    pids, ts = param_ids(table), ts_ms(table, key)
    last = np.r_[(pids[1:] != pids[:-1]) | (ts[1:] != ts[:-1]), True]
    return table if last.all() else table.filter(pa.array(last))


class FileRewrite:
    def __init__(
        self, storage: Storage, fmt: FileFormat, layout: Layout, rel: str, observer: Observer | None = None
    ) -> None:
        self.storage, self.fmt, self.layout, self.rel = storage, fmt, layout, rel
        self.folder = rel.rsplit("/", 1)[0]
        self.key = layout.time_key
        self.observer = observer
        self.fed: list[Ranges] = []
        self.rows = 0
        self._open()

    def _open(self) -> None:
        self.version = self.storage.open_version(self.rel)
        handle = self.version.handle
        self._old: Iterator[pa.Table] = (
            iter(())
            if handle is None
            else self.fmt.batches(handle, self.layout.schema, self.storage.display(self.rel))
        )
        self._old_buf = self.layout.empty
        self._old_done = handle is None
        self._last_old = -1  # the last parameter id read from the old file: they must ascend
        self._new_buf = self.layout.empty
        self._emitted: float = -1  # every row of parameters up to this id is written
        self._pending = 0  # the first feed in `fed` with parameters above `_emitted`
        self._output = self.storage.new_output(self.rel)
        with self.storage.errors("write", self.rel):
            self._writer = self.fmt.writer(self._output, self.layout.file_schema)

    # -- feeding -----------------------------------------------------------------------------------

    def feed(self, new: pa.Table, ranges: Ranges) -> None:
        """New rows (sorted by param_id, ts) of parameters above every earlier feed's, and the ranges
        they replace (a fetched window may have no rows: its range still empties the old ones). A new
        row also replaces an old one with the same (param_id, ts), inside a range or not."""
        if not len(ranges) and not new.num_rows:
            return
        if len(ranges):
            self.fed.append(ranges)
        if new.num_rows:
            self._new_buf = pa.concat_tables([self._new_buf, new]) if self._new_buf.num_rows else new
        top = max(
            int(ranges.param_id[-1]) if len(ranges) else -1, int(param_ids(new)[-1]) if new.num_rows else -1
        )
        self._advance(top)

    def _next_old(self) -> pa.Table | None:
        batch = next(self._old, None)
        if batch is None:
            self._old_done = True
            return None
        batch = self.layout.fill_partition_columns(batch, self.folder)
        pids = param_ids(batch)
        if len(pids) and (pids[0] < self._last_old or (np.diff(pids) < 0).any()):
            raise DataError(
                f"existing file {self.storage.display(self.rel)} is not sorted by parameter id; "
                "it was not written by etl"
            )
        if len(pids):
            self._last_old = int(pids[-1])
        return batch

    def _advance(self, upto: float) -> None:
        """Emit every row of parameters <= upto: the old file's, minus replaced ranges, merged with new."""
        while True:
            if not self._old_buf.num_rows:
                if self._old_done or (batch := self._next_old()) is None:
                    break
                self._old_buf = batch
            pids = param_ids(self._old_buf)
            if pids[0] > upto:
                break
            if pids[-1] > upto:  # the buffer runs past upto: its rows <= upto are complete
                cut = int(np.searchsorted(pids, upto, side="right"))
                self._emit(self._old_buf.slice(0, cut), upto)
                self._old_buf = self._old_buf.slice(cut)
                break
            # The buffer's last parameter may go on in the next batch: keep its rows back.
            last = int(pids[-1])
            cut = int(np.searchsorted(pids, last, side="left"))
            self._emit(self._old_buf.slice(0, cut), last - 1)
            tail = self._old_buf.slice(cut)
            batch = None if self._old_done else self._next_old()
            if batch is None:
                self._emit(tail, upto)
                self._old_buf = self.layout.empty
                break
            self._old_buf = pa.concat_tables([tail, batch])
        self._emit(self.layout.empty, upto)  # new rows with no old counterpart left

    def _emit(self, old: pa.Table, upto: float) -> None:
        """Write old rows (all of parameters <= upto) merged with the new rows of parameters <= upto."""
        new = self._new_buf
        if new.num_rows:
            cut = int(np.searchsorted(param_ids(new), upto, side="right"))
            new, self._new_buf = new.slice(0, cut), new.slice(cut)
        replaced = concat([r.between(self._emitted + 1, upto) for r in self.fed[self._pending :]])
        self._emitted = max(self._emitted, upto)
        while self._pending < len(self.fed) and self.fed[self._pending].param_id[-1] <= self._emitted:
            self._pending += 1  # feeds ascend: this one is written, later emits need not look at it
        if old.num_rows and len(replaced):
            stale = replaced.mask(old, self.key)
            if stale.any():
                old = old.filter(pa.array(~stale))
        merged = new if not old.num_rows else old if not new.num_rows else _merge(old, new, self.key)
        if self.observer is not None and len(replaced):
            self.observer(merged, replaced)  # every row of these parameters in this file: complete
        if merged.num_rows:
            with self.storage.errors("write", self.rel):
                self._writer.write(merged.select(self.layout.file_schema.names))
            self.rows += merged.num_rows

    # -- finishing ----------------------------------------------------------------------------------

    def finish(self) -> bool:
        """Swap the new version in; True if the file holds rows now (False: it is gone or was never)."""
        try:
            return self._finish()
        except BaseException:
            self.abort()
            raise

    def _finish(self) -> bool:
        return optimistic.swap(self._swap, again=self._redo)

    def _swap(self) -> bool:
        self._advance(float("inf"))
        with self.storage.errors("write", self.rel):
            self._writer.close()
        self.version.close()
        output = self._output if self.rows else None
        if self.version.token is None and output is None:
            self.storage.discard(self._output)
            return False  # nothing was there, nothing is
        if not self.storage.commit(self.rel, output, self.version.token):
            raise LostRace(f"cannot update {self.storage.display(self.rel)}: other writers kept changing it")
        if output is None:
            self.storage.discard(self._output)
        return output is not None

    def _redo(self) -> None:
        """Merge our rows (the previous output's rows inside our ranges) into the version now there."""
        log.debug("%s changed while being rewritten; merging again", self.storage.display(self.rel))
        ours, fed = self._output, self.fed
        observer, self.observer = self.observer, None
        self.fed, self.rows = [], 0
        self._open()
        ranges = concat(fed)
        with open(ours, "rb") as handle:
            done = -1
            for batch in self.fmt.batches(handle, self.layout.schema, self.storage.display(self.rel)):
                batch = self.layout.fill_partition_columns(batch, self.folder)
                top = int(param_ids(batch)[-1]) if batch.num_rows else done
                chunk = ranges.between(done + 1, top)
                self.feed(batch.filter(pa.array(chunk.mask(batch, self.key))), chunk)
                done = top
        self.feed(self.layout.empty, ranges.between(done + 1, float("inf")))
        self.storage.discard(ours)
        self.observer = observer

    def abort(self) -> None:
        with suppress(Exception):  # an abort must not hide the error that caused it
            self._writer.close()
        self.version.close()
        self.storage.discard(self._output)


def concat(parts: list[Ranges]) -> Ranges:
    """Ranges of several feeds as one (sorted by parameter when the feeds ascend, as a slab's do)."""
    parts = [p for p in parts if len(p)]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return Ranges.empty()
    return Ranges(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("param_id", "start", "end")))
