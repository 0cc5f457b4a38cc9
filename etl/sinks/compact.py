"""Move every row of a dataset's foreign files into the layout's bucket files, so readers open few files.

Sharded runs leave one file per shard and bucket in each partition, and older versions one file per
writer; compaction moves their rows into the unsharded layout's bucket files, a foreign file at a time,
streaming (no file is held whole). Each target file is swapped in before the foreign file is removed: a
reader listing the folder in between may count rows twice for a moment, never miss one; a compaction
killed there is healed by the next one (a row moved again replaces its copy). The caller holds every
state lock of the source, so no run writes meanwhile.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from etl.sinks.formats import FileFormat
from etl.sinks.layout import Layout
from etl.sinks.rewrite import FileRewrite, Ranges, param_ids
from etl.storage.atomic import Storage


def _partitions(storage: Storage, layout: Layout) -> dict[str, list[str]]:
    folders: dict[str, list[str]] = defaultdict(list)
    for rel in storage.find(layout.name):
        folder, _, name = rel.rpartition("/")
        if layout.data_key(name) is not None:
            folders[folder].append(name)
    return folders


def compact_layout(storage: Storage, fmt: FileFormat, layout: Layout) -> tuple[int, int]:
    """Every foreign file of `layout`'s dataset moved into its bucket files: (partitions, files removed)."""
    partitions = removed = 0
    for folder, names in sorted(_partitions(storage, layout).items()):
        foreign = [n for n in names if (key := layout.data_key(n)) is not None and layout.may_hold_ours(key)]
        for name in foreign:
            _move(storage, fmt, layout, folder, name)
        partitions += bool(foreign)
        removed += len(foreign)
    return partitions, removed


def _move(storage: Storage, fmt: FileFormat, layout: Layout, folder: str, name: str) -> None:
    """Every row of one foreign file into the bucket files of its parameters."""
    targets: dict[int, FileRewrite] = {}
    version = storage.open_version(f"{folder}/{name}")
    if version.handle is None:  # gone since it was listed
        return
    try:
        held = layout.empty  # the last parameter of a batch may go on in the next one
        for batch in fmt.batches(version.handle, layout.schema, storage.display(f"{folder}/{name}")):
            batch = pa.concat_tables([held, layout.fill_partition_columns(batch, folder)])
            pids = param_ids(batch)
            cut = int(np.searchsorted(pids, pids[-1], side="left")) if len(pids) else 0
            _feed(batch.slice(0, cut), storage, fmt, layout, folder, targets)
            held = batch.slice(cut)
        _feed(held, storage, fmt, layout, folder, targets)
        for rewrite in targets.values():
            rewrite.finish()
    except BaseException:
        for rewrite in targets.values():
            rewrite.abort()
        raise
    finally:
        version.close()
    storage.remove(f"{folder}/{name}")


def _feed(
    rows: pa.Table,
    storage: Storage,
    fmt: FileFormat,
    layout: Layout,
    folder: str,
    targets: dict[int, FileRewrite],
) -> None:
    if not rows.num_rows:
        return
    buckets = np.array([layout.bucket(int(p)) for p in param_ids(rows)])
    for bucket in np.unique(buckets).tolist():
        if bucket not in targets:
            targets[bucket] = FileRewrite(storage, fmt, layout, layout.file(folder, bucket))
        targets[bucket].feed(rows.filter(pa.array(buckets == bucket)), Ranges.empty())
