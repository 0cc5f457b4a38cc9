"""Merge the data files of each partition into one, so readers open fewer files.

A partition holds one file per writer; several writers (shards of a fleet) leave several. Compaction
holds the state lock, so no run of this config writes meanwhile, and removes temp files of killed runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from etl.config import Config
from etl.sinks import DatasetWriter, file_format
from etl.state import StateStore
from etl.storage import Storage
from etl.transform import SCHEMAS


@dataclass
class CompactSummary:
    partitions: int = 0  # partitions that held more than one file
    files_removed: int = 0
    temp_files_removed: int = 0


def compact(config: Config) -> CompactSummary:
    data = Storage(config.sink.path, config.sink.storage_options)
    store = StateStore(Storage(config.state_path, config.sink.storage_options))
    fmt = file_format(config.sink.format, config.sink.compression)
    summary = CompactSummary()
    with store.lock():
        summary.temp_files_removed = data.remove_temp_files()
        for series in SCHEMAS:  # also series a config no longer selects
            writer = DatasetWriter(data, series, fmt, list(config.sink.partition_by))
            for directory in writer.partitions():
                removed = writer.compact(directory)
                summary.partitions += bool(removed)
                summary.files_removed += removed
    return summary
