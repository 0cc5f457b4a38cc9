"""`etl compact` and `etl vacuum`: a sink's maintenance, holding the state locks so no run writes meanwhile.

Parquet/CSV datasets: the rows of foreign files (other shard counts, bucket counts, older versions)
move into the config's layout (etl/sinks/compact.py), and temp files of killed runs are removed. Lake
tables: small files are bin-packed into new versions, and versions older than a retention are expired
with the files only they reference; a reader on the current version (or any version inside the
retention) keeps working.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from etl.config import Config
from etl.model import Series
from etl.pipeline.build import Build
from etl.sinks.compact import compact_layout
from etl.sinks.lake.common import LakeTable


@dataclass
class Maintenance:
    partitions: int = 0  # datasets: partitions that held files of another layout
    files: dict[str, int] = field(default_factory=dict)  # per dataset or table: files merged away or removed
    temp_files_removed: int = 0

    @property
    def tables(self) -> int:
        return len(self.files)


def _lake_tables(build: Build) -> list[LakeTable]:
    lake = build.lake
    assert lake is not None
    tables = [lake.series(s) for s in Series] + [lake.quality()]
    tables += [lake.dimension(name) for name in lake.dimension_names()]
    return [t for t in tables if t.exists()]


def compact(config: Config) -> Maintenance:
    """Datasets: every row of the source in the config's layout. Lake tables: small files bin-packed."""
    build = Build(config)
    out = Maintenance()
    with ExitStack() as locks:
        for store in build.state_stores():  # every shard's too: none may write meanwhile
            locks.enter_context(store.lock())
        if build.lake is not None:
            for table in _lake_tables(build):
                out.files[table.name] = table.compact()
            return out
        out.temp_files_removed = build.data.remove_temp_files()
        # also series a config no longer selects, and the quality dataset (laid out like the series)
        for layout in [*(build.layout(series) for series in Series), build.quality_layout()]:
            partitions, removed = compact_layout(build.data, build.fmt, layout)
            out.partitions += partitions
            out.files[layout.name] = removed
    return out


def vacuum(config: Config, retain_ms: int) -> Maintenance:
    """Lake tables: versions older than `retain_ms` expired, and the files only they reference deleted."""
    build = Build(config)
    out = Maintenance()
    with build.state_store().lock():
        for table in _lake_tables(build):
            out.files[table.name] = table.vacuum(retain_ms)
    return out
