"""Move every row of a source into the config's layout, so readers open few files.

Sharded runs leave one file per shard and bucket in each partition, and older versions one file per
writer; compaction moves their rows into the unsharded layout's bucket files, a foreign file at a time,
streaming (no file is held whole). It holds every state lock of the source (unsharded and each
shard's), so no run writes meanwhile, and removes temp files left by killed runs. Each target file is
swapped in before the foreign file is removed: a reader listing the folder in between may count rows
twice for a moment, never miss one; a compaction killed there is healed by the next one (a row moved
again replaces its copy).
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.config import Config
from etl.model import Series
from etl.pipeline.build import Build
from etl.sinks.layout import Layout
from etl.sinks.rewrite import FileRewrite, Ranges, param_ids
from etl.storage.files import Storage


@dataclass
class CompactSummary:
    partitions: int = 0  # partitions that held files of another layout
    files_removed: int = 0
    temp_files_removed: int = 0


def _partitions(storage: Storage, layout: Layout) -> dict[str, list[str]]:
    folders: dict[str, list[str]] = defaultdict(list)
    for rel in storage.find(layout.name):
        folder, _, name = rel.rpartition("/")
        if layout.data_key(name) is not None:
            folders[folder].append(name)
    return folders


def _move(storage: Storage, build: Build, layout: Layout, folder: str, name: str) -> None:
    """Every row of one foreign file into the bucket files of its parameters."""
    targets: dict[int, FileRewrite] = {}
    version = storage.open_version(f"{folder}/{name}")
    try:
        held = layout.schema.empty_table()  # the last parameter of a batch may go on in the next one
        for batch in build.fmt.batches(version.handle, layout.schema, storage.display(f"{folder}/{name}")):
            batch = pa.concat_tables([held, layout.fill_partition_columns(batch, folder)])
            pids = param_ids(batch)
            cut = int(np.searchsorted(pids, pids[-1], side="left")) if len(pids) else 0
            _feed(batch.slice(0, cut), storage, build, layout, folder, targets)
            held = batch.slice(cut)
        _feed(held, storage, build, layout, folder, targets)
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
    build: Build,
    layout: Layout,
    folder: str,
    targets: dict[int, FileRewrite],
) -> None:
    if not rows.num_rows:
        return
    buckets = np.array([layout.bucket(int(p)) for p in param_ids(rows)])
    for bucket in np.unique(buckets).tolist():
        if bucket not in targets:
            targets[bucket] = FileRewrite(storage, build.fmt, layout, layout.file(folder, bucket))
        targets[bucket].feed(rows.filter(pa.array(buckets == bucket)), Ranges.of([]))


def compact(config: Config) -> CompactSummary:
    build = Build(config)
    storage = build.data
    summary = CompactSummary()
    with ExitStack() as locks:
        for store in build.state_stores():
            locks.enter_context(store.lock())
        summary.temp_files_removed = storage.remove_temp_files()
        # also series a config no longer selects, and the quality dataset (laid out like the series)
        for layout in [*(build.layout(series) for series in Series), build.quality_layout()]:
            for folder, names in sorted(_partitions(storage, layout).items()):
                foreign = [n for n in names if layout.may_hold_ours(layout.data_key(n))]
                for name in foreign:
                    _move(storage, build, layout, folder, name)
                summary.partitions += bool(foreign)
                summary.files_removed += len(foreign)
    return summary
