"""Everything a run needs, built from a validated config in one place: the client, the storages, the
file layouts and slab writers, the checkpoint stores. The rest of the pipeline receives them.

This is where the config meets the machine: the password file is read once, the client's options are
made (the TLS context with them), and the warnings about weak settings are given.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import SecretStr

from etl.client import ClientOptions, ClientStats, MonitoringClient
from etl.config import Config
from etl.errors import ConfigError
from etl.model import QUALITY, QUALITY_SCHEMA, QUALITY_TIME_KEY, Series, Shard
from etl.pipeline import dimensions
from etl.pipeline.dimensions import Rows
from etl.pipeline.plan import Slab
from etl.quality.writer import QualitySlabWriter, QualityTracker
from etl.sinks.base import SlabSink
from etl.sinks.files import SlabWriter
from etl.sinks.formats import FileFormat, file_format
from etl.sinks.layout import LEGACY_BUCKETS, Layout, auto_buckets
from etl.state import StateStore
from etl.storage.files import Storage
from etl.support import redact
from etl.timeutil import ms_to_datetime, now_ms

if TYPE_CHECKING:  # the lake modules (pyarrow.dataset, deltalake, pyiceberg) load only for lake formats
    from etl.sinks.lake import Lake


class Build:
    """The objects of one (config, shard)."""

    def __init__(self, config: Config, shard: Shard | None = None) -> None:
        self.config = config
        self.shard = shard
        self.run_id = ""  # the run's id, set by its Runner: lake commits name the run that made them
        # The run's window end once the server's clock has cut it (set by its Runner): quality rows
        # describe a day up to there, not up to a window.end still in the future.
        self.window_end: int | None = None
        self._buckets: int | None = config.sink.buckets

    # -- the platform ------------------------------------------------------------------------------

    @cached_property
    def password(self) -> str:
        source = self.config.source
        if source.password_file is None:
            return source.password.get_secret_value() if source.password else ""
        try:
            secret = source.password_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"config error: source.password_file: cannot read {source.password_file}: {exc.strerror}"
            ) from None
        redact.register(secret)
        return secret

    @cached_property
    def client_options(self) -> ClientOptions:
        """How the client talks to the source, made once (the TLS trust with it)."""
        return ClientOptions.from_config(self.config)

    def client(self, stats: ClientStats | None = None) -> MonitoringClient:
        source = self.config.source
        return MonitoringClient(
            source.base_url, source.username, self.password, options=self.client_options, stats=stats
        )

    # -- the output ----------------------------------------------------------------------------------

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

        return Lake(self.config.sink, self.data)

    @property
    def app(self) -> str:
        from etl.sinks.lake import app_id

        return app_id(self.config.source.name, self.shard)

    def layout(self, series: Series) -> Layout:
        return self._layouts[Series(series).value]

    def quality_layout(self) -> Layout:
        """The quality dataset (etl/quality/): laid out like the raw series, a row per parameter and day."""
        return self._layouts[QUALITY]

    @property
    def buckets(self) -> int:
        """Files per partition: sink.buckets, or (auto) what the run decided or the dataset recorded."""
        if self._buckets is None:  # a command that runs nothing (compact, doctor): the dataset's record
            stores = [self.state_store(), *self.state_stores()]  # a shard's record serves the dataset too
            self._buckets = next((b for s in stores if (b := s.buckets())), LEGACY_BUCKETS)
        return self._buckets

    def decide_buckets(
        self, store: StateStore, parameters: int, existing: bool, *, record: bool = True
    ) -> int:
        """The run's files per partition. Unset (auto): what the dataset was given at its first run, or
        for a new Parquet/CSV dataset `auto_buckets` of its parameters; a dataset checkpointed before
        the count was recorded (`existing`), or a lake table, keeps 4. The count in effect is recorded in
        `store` (`record`) before any file is written, so a later auto run keeps it whatever the fleet's
        width."""
        recorded = store.buckets()
        chosen = self.config.sink.buckets or recorded
        if chosen is None:
            chosen = LEGACY_BUCKETS if existing or self.config.sink.lake else auto_buckets(parameters)
        if record and chosen != recorded:
            store.note_buckets(chosen)
        self._buckets = chosen
        return chosen

    @cached_property
    def _layouts(self) -> dict[str, Layout]:
        """Every dataset's layout, made once: each slab made its own on the event loop (0.15-0.2 ms)."""
        sink = self.config.sink
        where = (sink.partition_by, self.fmt.extension, self.config.source.name, self.shard, self.buckets)
        layouts = {series.value: Layout(series, *where) for series in Series}
        layouts[QUALITY] = Layout(
            Series.RAW, *where, name=QUALITY, schema=QUALITY_SCHEMA, time_key=QUALITY_TIME_KEY
        )
        return layouts

    def slab_writer(self, slab: Slab, remote: bool = False) -> SlabSink:
        """`remote`: on a Dask worker (lake tables: data files written there, committed by the run)."""
        if self.lake is not None:
            quality = (self.lake.quality(), self._tracker(slab)) if slab.series is Series.RAW else None
            from etl.sinks.lake.writer import LakeSlabWriter

            return LakeSlabWriter(self.lake.series(slab.series), self.layout(slab.series), quality, remote)
        if slab.series is Series.RAW:
            # The raw files' observer computes each parameter-day's quality row from the rows it writes;
            # the writer writes those rows once its own files are in, before the slab is checkpointed.
            return QualitySlabWriter(
                self.data,
                self.fmt,
                self.layout(slab.series),
                slab.bucket,
                self.quality_layout(),
                self._tracker(slab),
            )
        return SlabWriter(self.data, self.fmt, self.layout(slab.series), slab.bucket)

    def _tracker(self, slab: Slab) -> QualityTracker:
        window = self.config.window
        end = self.window_end if self.window_end is not None else window.end_ms(now_ms())
        return QualityTracker(slab.windows, self.config.source.name, (window.start_ms, end))

    def references_written(self) -> bool:
        """Whether every reference table of this source is there to be kept: file formats look for its
        files (one deleted by hand is fetched again); a lake's tables are taken as its catalog keeps them."""
        if self.lake is not None:
            return True
        source = self.config.source.name
        present = set(self.data.find(dimensions.FOLDER))
        return all(dimensions.table_file(name, source, self.fmt) in present for name in dimensions.REFERENCES)

    def write_dimensions(self, tables: dict[str, Rows]) -> list[str]:
        """The reference tables' snapshots: files, or lake tables."""
        if self.lake is not None:
            from etl.sinks.lake.writer import write_dimensions

            return write_dimensions(tables, self.lake.dimension, self.config.source.name)
        return dimensions.write(self.data, self.fmt, tables, self.config.source.name)

    # -- checkpoints --------------------------------------------------------------------------------

    def _state_storage(self, shard: Shard | None) -> Storage:
        path = self.config.state_path
        return Storage(f"{path}/{shard.folder}" if shard else path, self.config.sink.storage_options)

    def state_store(self) -> StateStore:
        return StateStore(self._state_storage(self.shard), self.config.state.lease / 1000)

    def state_stores(self) -> list[StateStore]:
        """This source's unsharded store and every shard's that exists."""
        names = self._state_storage(None).listdir("")
        shards = [shard for name in names if (shard := Shard.from_folder(name))]
        return [StateStore(self._state_storage(s), self.config.state.lease / 1000) for s in [None, *shards]]

    # -- other processes ------------------------------------------------------------------------------

    def remote_config(self) -> Config:
        """The config a slab runs with on another machine: nothing of this one needed. An absolute local
        output path, the password itself rather than its file, the resolved storage options (endpoint
        included), the CA bundle by absolute path (workers need it at that path); credentials of the
        store stay theirs (environment, profile, role)."""
        config = self.config
        sink = config.sink.model_copy(
            update={
                "path": os.path.abspath(config.sink.path) if self.data.local else config.sink.path,
                "storage_options": self.data.options,
                "buckets": self.buckets,
            }
        )
        source = config.source.model_copy(
            update={
                "password": SecretStr(self.password),
                "password_file": None,
                "ca_bundle": config.source.ca_bundle.resolve() if config.source.ca_bundle else None,
            }
        )
        update: dict[str, object] = {"sink": sink, "source": source}
        if self.window_end is not None:
            update["window"] = config.window.model_copy(update={"end": ms_to_datetime(self.window_end)})
        return config.model_copy(update=update)
