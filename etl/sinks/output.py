"""A config's output, opened without the platform's client: its storage, file format, lake tables,
layouts and checkpoint stores. Reading (`etl.read`, `etl.connect`) and maintenance need nothing more; a
run's `etl.pipeline.build.Build` adds the client and the slab writers."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from etl.config import Config
from etl.model import QUALITY, QUALITY_SCHEMA, QUALITY_TIME_KEY, Series, Shard
from etl.sinks.formats import FileFormat, file_format
from etl.sinks.layout import LEGACY_BUCKETS, Layout, auto_buckets
from etl.state import StateStore
from etl.state.lock import AdvisoryLock, RunLock
from etl.state.store import Recorded
from etl.storage.atomic import Storage
from etl.support import redact

if TYPE_CHECKING:  # the lake modules (pyarrow.dataset, deltalake, pyiceberg) load only for lake formats
    from etl.sinks.lake import Lake
    from etl.storage.postgres import Database


@dataclass(frozen=True, eq=False)
class Output:
    """The output of one (config, shard)."""

    config: Config
    shard: Shard | None = None
    # Every dataset's layouts by files per partition, made once: each slab made its own on the event loop.
    _layouts: dict[int, dict[str, Layout]] = field(default_factory=dict, init=False, repr=False)

    @cached_property
    def data(self) -> Storage:
        return Storage(self.config.sink.path, self.config.sink.storage_options)

    @cached_property
    def fmt(self) -> FileFormat:
        """The file format; lake tables hold Parquet files (their layouts name nothing else)."""
        sink = self.config.sink
        return file_format("parquet" if sink.lake else sink.format, sink.compression)

    @cached_property
    def lake(self) -> Lake | None:
        """The lake tables (sink.format delta / iceberg), or None for Parquet/CSV datasets."""
        if not self.config.sink.lake:
            return None
        from etl.sinks.lake import Lake

        return Lake(self.config.sink, self.data, self.database)

    @cached_property
    def database(self) -> Database | None:
        """The PostgreSQL database (sink.format postgres), its password read from sink.password_file."""
        sink = self.config.sink
        if sink.format != "postgres" or sink.dsn is None:
            return None
        from etl.storage.postgres import Database

        password = None
        if sink.password_file is not None:
            password = redact.read_secret(sink.password_file, "sink.password_file")
        return Database(sink.dsn, sink.db_schema, password)

    def close(self) -> None:
        """Let go of the database connection, if any (the tables keep nothing else open)."""
        if "database" in self.__dict__ and self.database is not None:
            self.database.close()

    @property
    def app(self) -> str:
        from etl.sinks.lake import app_id

        return app_id(self.config.source.name, self.shard)

    # -- files per partition ---------------------------------------------------------------------------

    @cached_property
    def buckets(self) -> int:
        """Files per partition for a command that runs nothing (compact, doctor, reading): sink.buckets, or
        the dataset's record (a shard's record serves the dataset too). A run decides its own
        (`decide_buckets`)."""
        if self.config.sink.buckets is not None:
            return self.config.sink.buckets
        stores = [self.state_store(), *self.state_stores()]
        return next((b for s in stores if (b := s.buckets())), LEGACY_BUCKETS)

    def decide_buckets(
        self, store: StateStore, parameters: int, existing: bool, *, record: bool = True
    ) -> int:
        """The run's files per partition. Unset (auto): what the dataset was given at its first run, or
        for a new Parquet/CSV dataset `auto_buckets` of its parameters; a dataset checkpointed before
        the count was recorded (`existing`), or a lake table, keeps 4. The count in effect is recorded in
        `store` (`record`) before any file is written, so a later auto run keeps it whatever the fleet's
        width; so are the output's format, partitioning, source name and platform (`Recorded`), which
        a later run must keep (etl/pipeline/identity.py)."""
        recorded = store.layout()
        chosen = self.config.sink.buckets or recorded.buckets
        if chosen is None:
            chosen = LEGACY_BUCKETS if existing or self.config.sink.lake else auto_buckets(parameters)
        sink, source = self.config.sink, self.config.source
        tables = self.database.target if self.database is not None else None
        now = Recorded(chosen, sink.format, tuple(sink.partition_by), source.name, source.platform, tables)
        if record and now != recorded:
            store.note_layout(now)
        return chosen

    # -- layouts ----------------------------------------------------------------------------------------

    def layout(self, series: Series, buckets: int | None = None) -> Layout:
        """A series' layout with `buckets` files per partition (default: `self.buckets`)."""
        return self._layouts_of(buckets)[Series(series).value]

    def quality_layout(self, buckets: int | None = None) -> Layout:
        """The quality dataset (etl/quality/): laid out like the raw series, a row per parameter and day."""
        return self._layouts_of(buckets)[QUALITY]

    def _layouts_of(self, buckets: int | None) -> dict[str, Layout]:
        count = self.buckets if buckets is None else buckets
        if count not in self._layouts:
            sink = self.config.sink
            where = (sink.partition_by, self.fmt.extension, self.config.source.name, self.shard, count)
            layouts = {series.value: Layout(series, *where) for series in Series}
            layouts[QUALITY] = Layout(
                Series.RAW, *where, name=QUALITY, schema=QUALITY_SCHEMA, time_key=QUALITY_TIME_KEY
            )
            self._layouts[count] = layouts
        return self._layouts[count]

    # -- checkpoints ----------------------------------------------------------------------------------

    def _state_storage(self, shard: Shard | None, source: str | None = None) -> Storage:
        path = self.config.state_path if source is None else f"{self.config.state_root}/{source}"
        return Storage(f"{path}/{shard.folder}" if shard else path, self.config.sink.storage_options)

    def state_store(self) -> StateStore:
        return self._store(self._state_storage(self.shard), None, self.shard)

    def _store(self, storage: Storage, source: str | None, shard: Shard | None) -> StateStore:
        """A checkpoint store; PostgreSQL's also holds the advisory lock of its (source, shard)."""
        lease = self.config.state.lease / 1000
        if self.database is None:
            return StateStore(storage, lease)
        from etl.sinks.lake import app_id

        app = app_id(source or self.config.source.name, shard)
        return StateStore(storage, lease, AdvisoryLock(RunLock(storage, lease), self.database, app))

    def state_stores(self, every_source: bool = False) -> list[StateStore]:
        """This source's unsharded store and every shard's that exists; with `every_source`, those of
        every source of the output too (the writers of lake tables that several sources share)."""
        sources: list[str | None] = [None]
        if every_source:
            others = Storage(self.config.state_root, self.config.sink.storage_options).listdir("")
            sources += sorted(name for name in others if name != self.config.source.name)
        stores: list[StateStore] = []
        for source in sources:
            names = self._state_storage(None, source).listdir("")
            shards = [shard for name in names if (shard := Shard.from_folder(name))]
            stores += [self._store(self._state_storage(s, source), source, s) for s in [None, *shards]]
        return stores
