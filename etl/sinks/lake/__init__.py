"""Table formats (sink.format delta / iceberg / postgres): a table per series, the quality dataset and each
reference table, written exactly once with the slab's checkpoint inside the commit (docs/lake.md,
docs/postgres.md)."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from etl.config import SinkConfig
from etl.model import QUALITY, QUALITY_TIME_KEY, Series, Shard
from etl.sinks.lake.common import LakeTable, Policy
from etl.sinks.layout import LEGACY_BUCKETS
from etl.storage.atomic import Storage
from etl.support.optional import require

if TYPE_CHECKING:  # pyiceberg loads for Iceberg tables only
    from pyiceberg.catalog import Catalog

    from etl.storage.postgres import Database

DIMENSIONS_FOLDER = "dimensions"


def load_library(fmt: str) -> None:
    """The library of a lake format, imported: a missing or too old one is one line naming its extra."""
    if fmt == "delta":
        require("deltalake", "sink.format delta")
    else:
        require("pyiceberg", "sink.format iceberg")
        from etl.sinks.lake import pyiceberg_compat  # noqa: F401 - a pyiceberg etl is not tested with stops here


class Lake:
    """The tables of one sink, made on demand (each cached: a table keeps its app's version counter)."""

    def __init__(self, sink: SinkConfig, storage: Storage, database: Database | None = None) -> None:
        self.sink, self.storage = sink, storage
        self.database = database  # postgres
        self.policy = Policy(sink.retention, sink.versions, sink.compact, sink.buckets or LEGACY_BUCKETS)
        self._tables: dict[str, LakeTable] = {}
        # One object per table, whichever thread asks first: it holds the table's version counter.
        self._guard = threading.RLock()

    @cached_property
    def _catalog(self) -> Catalog:
        from etl.sinks.lake.iceberg_table import catalog

        with self._guard:
            found: Catalog = catalog(self.storage, self.sink.catalog)
            return found

    def _table(self, name: str, time_key: str | None, partitioned: bool) -> LakeTable:
        with self._guard:
            return self._made(name, time_key, partitioned)

    def _made(self, name: str, time_key: str | None, partitioned: bool) -> LakeTable:
        if name not in self._tables:
            if self.database is not None:
                from etl.sinks.lake.postgres import PostgresTable

                self._tables[name] = PostgresTable(self.database, name, time_key, self.policy)
            elif self.sink.format == "delta":
                from etl.sinks.lake.delta_table import DeltaTable

                columns = tuple(self.sink.partition_by) if partitioned else ()
                self._tables[name] = DeltaTable(self.storage, name, columns, time_key, self.policy)
            else:
                from etl.sinks.lake.iceberg_table import IcebergTable

                # Iceberg partitions by day(time_key) itself; `date` stays a plain column for readers.
                columns = tuple(c for c in self.sink.partition_by if c != "date") if partitioned else ()
                self._tables[name] = IcebergTable(
                    self._catalog, self.storage, name, columns, time_key, self.policy
                )
        return self._tables[name]

    def series(self, series: Series) -> LakeTable:
        return self._table(Series(series).value, "ts", True)

    def quality(self) -> LakeTable:
        return self._table(QUALITY, QUALITY_TIME_KEY, True)

    def dimension(self, name: str) -> LakeTable:
        return self._table(f"{DIMENSIONS_FOLDER}/{name}", None, False)

    def prepare(self, series: list[Series]) -> None:
        """The series tables and the quality table made, empty, where missing: Dask workers write data
        files into them before the run's first commit."""
        from etl.model import QUALITY_SCHEMA, SCHEMAS
        from etl.sinks.lake.common import with_date

        for s in series:
            self.series(s).prepare(with_date(SCHEMAS[Series(s)].empty_table(), "ts").schema)
        if Series.RAW in series:
            self.quality().prepare(with_date(QUALITY_SCHEMA.empty_table(), QUALITY_TIME_KEY).schema)

    def opened(self) -> list[LakeTable]:
        """The tables this object has made so far (those a run wrote)."""
        return list(self._tables.values())

    def dimension_names(self) -> list[str]:
        if self.database is not None:
            from etl.sinks.lake.postgres import dimension_names

            return dimension_names(self.database)
        if self.sink.format == "delta":
            return [n for n in self.storage.listdir(DIMENSIONS_FOLDER)]
        prefix = f"{DIMENSIONS_FOLDER}_"
        return [t[-1][len(prefix) :] for t in self._catalog.list_tables("etl") if t[-1].startswith(prefix)]


def app_id(source: str, shard: Shard | None) -> str:
    """Whose checkpoints a commit carries: one per (source, shard), as the state stores."""
    return f"etl-{source}" + (f"-{shard.label}" if shard else "")
