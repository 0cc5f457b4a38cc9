"""Merge the data files of each partition into one, so readers open fewer files.

A partition holds one file per writer; shards of a fleet leave one each. Compaction holds every state
lock of the config (unsharded and each shard's), so no run writes meanwhile, and removes temp files
left by killed runs.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import dataclass

from etl.config import Config
from etl.sinks import DatasetWriter, file_format
from etl.state import StateStore
from etl.storage import Storage
from etl.transform import SCHEMAS

_SHARD_FOLDER = re.compile(r"shard-(\d+)of(\d+)")


@dataclass
class CompactSummary:
    partitions: int = 0  # partitions that held more than one file
    files_removed: int = 0
    temp_files_removed: int = 0


def _stores(config: Config) -> list[StateStore]:
    """The unsharded state store and every shard's that exists."""
    options, lease = config.sink.storage_options, config.state.lease / 1000
    shards = [m for name in Storage(config.state_path, options).listdir("") if (m := _SHARD_FOLDER.fullmatch(name))]
    return [StateStore.open(config.state_path, options, None, lease)] + [
        StateStore.open(config.state_path, options, (int(m.group(1)), int(m.group(2))), lease) for m in shards
    ]


def compact(config: Config) -> CompactSummary:
    data = Storage(config.sink.path, config.sink.storage_options)
    fmt = file_format(config.sink.format, config.sink.compression)
    summary = CompactSummary()
    with ExitStack() as locks:
        for store in _stores(config):
            locks.enter_context(store.lock())
        summary.temp_files_removed = data.remove_temp_files()
        for series in SCHEMAS:  # also series a config no longer selects
            writer = DatasetWriter(data, series, fmt, list(config.sink.partition_by))
            for directory in writer.partitions():
                removed = writer.compact(directory)
                summary.partitions += bool(removed)
                summary.files_removed += removed
    return summary
