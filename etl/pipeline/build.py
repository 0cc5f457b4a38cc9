"""Everything a run needs, built from a validated config in one place: the output (`etl.sinks.output`:
storages, file layouts, lake tables, checkpoint stores), the client and the slab writers. The rest of
the pipeline receives them.

This is where the config meets the machine: the password file is read once, the client's options are
made (the TLS context with them), and the warnings about weak settings are given.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import cached_property

from pydantic import SecretStr

from etl.client import ClientOptions, ClientStats, MonitoringClient
from etl.client.budget import Part
from etl.config import Config
from etl.errors import StorageError
from etl.model import Series
from etl.pipeline import dimensions, records
from etl.pipeline.dimensions import Rows
from etl.pipeline.plan import Slab
from etl.quality.writer import QualitySlabWriter, QualityTracker
from etl.sinks.base import SlabSink
from etl.sinks.hive import SlabWriter
from etl.sinks.layout import DIMENSIONS_FOLDER
from etl.sinks.output import Output
from etl.state.budget import ShardBudget
from etl.support import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decisions:
    """What a run settles once it has seen the fleet and the server's clock, and writes its slabs by
    (plain data: it goes with each slab's job to a Dask worker)."""

    buckets: int  # files per partition
    # Quality rows describe a day up to here: the config's window end (a backfill's --to does not end a
    # day early), cut at the server's clock, never up to a window.end still in the future.
    quality_end: int


@dataclass(frozen=True, eq=False)
class Build(Output):
    """The objects of one (config, shard): its output, and the client and slab writers of a run."""

    # -- the platform ------------------------------------------------------------------------------

    @cached_property
    def password(self) -> str:
        source = self.config.source
        if source.password_file is None:
            return source.password.get_secret_value() if source.password else ""
        return redact.read_secret(source.password_file, "source.password_file")

    @cached_property
    def client_options(self) -> ClientOptions:
        """How the client talks to the source, made once (the TLS trust with it)."""
        return ClientOptions.from_config(self.config)

    def client(self, stats: ClientStats | None = None, max_requests: int | None = None) -> MonitoringClient:
        """The client of the source; `max_requests`: the most it sends in all (`etl verify --max-requests`)."""
        source = self.config.source
        options = self.client_options
        if max_requests is not None:
            options = replace(options, max_requests=max_requests)
        return MonitoringClient(source.base_url, source.username, self.password, options=options, stats=stats)

    @asynccontextmanager
    async def shared(self, client: MonitoringClient, take_part: bool = True) -> AsyncIterator[None]:
        """A shard's requests admitted by its part of the source's limit, which the shards running at once
        learn together through the state storage (etl/state/budget.py); nothing changes for a run that is
        not a shard, or that does not `take_part` (a plan)."""
        if self.shard is None or not take_part:
            yield
            return
        session = client.session
        part = Part(session.limit)
        budget = ShardBudget(
            self._state_storage(None),
            self.shard.label,
            part,
            self.config.state.lease / 1000,
            lambda: session.demand,
            self.shard.count,
        )
        await asyncio.to_thread(budget.renew)
        session.limit = part
        renewing = asyncio.ensure_future(_renewing(budget))
        try:
            yield
        finally:
            renewing.cancel()
            session.limit = part.inner
            session.admit()
            try:
                await asyncio.to_thread(budget.leave)
            except StorageError as exc:
                log.warning("could not leave the shards' budget (its entry expires by itself): %s", exc)

    # -- a run's slabs ----------------------------------------------------------------------------------

    def slab_writer(self, slab: Slab, decisions: Decisions, remote: bool = False) -> SlabSink:
        """`remote`: on a Dask worker (lake tables: data files written there, committed by the run)."""
        layout = self.layout(slab.series, decisions.buckets)
        if self.lake is not None:
            quality = (
                (self.lake.quality(), self._tracker(slab, decisions)) if slab.series is Series.RAW else None
            )
            from etl.sinks.lake.writer import LakeSlabWriter

            return LakeSlabWriter(self.lake.series(slab.series), layout, quality, remote)
        if slab.series is Series.RAW:
            # The raw files' observer computes each parameter-day's quality row from the rows it writes;
            # the writer writes those rows once its own files are in, before the slab is checkpointed.
            return QualitySlabWriter(
                self.data,
                self.fmt,
                layout,
                slab.bucket,
                self.quality_layout(decisions.buckets),
                self._tracker(slab, decisions),
            )
        return SlabWriter(self.data, self.fmt, layout, slab.bucket)

    def _tracker(self, slab: Slab, decisions: Decisions) -> QualityTracker:
        span = (self.config.window.start_ms, decisions.quality_end)
        return QualityTracker(slab.windows, self.config.source.name, span, slab.known)

    # -- the reference tables ---------------------------------------------------------------------------

    def references_written(self) -> bool:
        """Whether every reference table of this source is there to be kept: file formats look for its
        files (one deleted by hand is fetched again); a lake's tables are taken as its catalog keeps them."""
        if self.lake is not None:
            return True
        source = self.config.source.name
        present = set(self.data.find(DIMENSIONS_FOLDER))
        return all(dimensions.table_file(name, source, self.fmt) in present for name in dimensions.REFERENCES)

    def write_dimensions(self, tables: dict[str, Rows]) -> list[str]:
        """The reference tables' snapshots: files, or lake tables."""
        if self.lake is not None:
            from etl.sinks.lake.writer import write_dimensions

            # PostgreSQL's columns hold no Arrow lists or records: JSON text, as CSV's.
            flat = records.flat if self.database is not None else None
            return write_dimensions(tables, self.lake.dimension, self.config.source.name, flat)
        return dimensions.write(self.data, self.fmt, tables, self.config.source.name)

    # -- other processes ------------------------------------------------------------------------------

    def remote_config(self) -> Config:
        """The config a slab runs with on another machine: nothing of this one needed. An absolute local
        output path, the password itself rather than its file, the resolved storage options (endpoint
        included), the CA bundle by absolute path (workers need it at that path); credentials of the
        store stay theirs (environment, profile, role). What the run decided goes with each job."""
        config = self.config
        sink = config.sink.model_copy(
            update={
                "path": os.path.abspath(config.sink.path) if self.data.local else config.sink.path,
                "storage_options": self.data.options,
                # the database's password itself rather than its file, as the source's
                **({"dsn": self.database.uri, "password_file": None} if self.database is not None else {}),
            }
        )
        source = config.source.model_copy(
            update={
                "password": SecretStr(self.password),
                "password_file": None,
                "ca_bundle": config.source.ca_bundle.resolve() if config.source.ca_bundle else None,
            }
        )
        return config.model_copy(update={"sink": sink, "source": source})


async def _renewing(budget: ShardBudget) -> None:
    while True:
        await asyncio.sleep(budget.wait())
        try:
            await asyncio.to_thread(budget.renew)
        except StorageError as exc:  # a blip: the next renewal may succeed before the lease ends
            log.warning("could not renew this shard's entry in the shards' budget: %s", exc)
