"""Merge the data files of each partition into one, so readers open fewer files.

A partition holds one file per writer; shards of a fleet leave one each. Compaction holds every state
lock of the config (unsharded and each shard's), so no run writes meanwhile, and removes temp files
left by killed runs.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from etl.config import Config
from etl.state import StateStore
from etl.storage import Storage
from etl.transform import SCHEMAS
from etl.work import dataset_writer


@dataclass
class CompactSummary:
    partitions: int = 0  # partitions that held more than one file
    files_removed: int = 0
    temp_files_removed: int = 0


def compact(config: Config) -> CompactSummary:
    data = Storage(config.sink.path, config.sink.storage_options)
    summary = CompactSummary()
    with ExitStack() as locks:
        for store in StateStore.all_for_config(config):
            locks.enter_context(store.lock())
        summary.temp_files_removed = data.remove_temp_files()
        for series in SCHEMAS:  # also series a config no longer selects
            writer = dataset_writer(config, series)
            for directory in writer.partitions():
                removed = writer.compact(directory)
                summary.partitions += bool(removed)
                summary.files_removed += removed
    return summary
