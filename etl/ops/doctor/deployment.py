"""What the checks of `etl doctor` read (each loaded once), the bars they hold it to, and the verdict."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import duckdb

from etl.config import Config
from etl.dataset.query import connect, views
from etl.errors import StorageError
from etl.model import Shard
from etl.ops.findings import Finding, worst
from etl.pipeline.build import Build
from etl.state import Coverage, StateStore
from etl.timeutil import DAY_MS, HOUR_MS, MINUTE_MS

CHECKS = ("server", "checkpoints", "runs", "locks", "leftovers", "files", "lake", "sources")
SOURCE_SAMPLES = 3  # parameters whose last checkpointed day is compared with the server
SPOOLS = ("etl-lake-*.arrow", "etl-spool-*.tmp", "etl-rows-*")  # local spools of runs (etl/sinks, storage)
HOST = socket.gethostname()


@dataclass(frozen=True)
class Limits:
    """The bars the checks hold a deployment to."""

    max_age_ms: int | None = None  # the last successful run at most this old (None: not checked)
    retain_ms: int = 7 * DAY_MS  # lake versions older than this should be vacuumed (etl vacuum --retain)
    files_per_partition: int | None = None  # lake tables; None: 4 x sink.buckets
    metadata_bytes: int = 64 << 20  # a lake table's metadata (Delta log, Iceberg metadata file)
    runs: int = 10  # the last run records read
    future_ms: int = 5 * MINUTE_MS  # clock skew forgiven before a checkpoint counts as "past now"
    spool_dir: str | None = None  # None: the system's temp folder
    spool_age_ms: int = HOUR_MS  # a spool older than this has no live run


@dataclass
class Diagnosis:
    findings: list[Finding]
    requests_made: int = 0

    def healthy(self, strict: bool = False) -> bool:
        status = worst(self.findings)
        return status == "ok" or status == "warn" and not strict

    def as_dict(self, strict: bool = False) -> dict[str, Any]:
        return {
            "healthy": self.healthy(strict),
            "status": worst(self.findings),
            "findings": [f.as_dict() for f in self.findings],
            "requests_made": self.requests_made,
        }


@dataclass
class Deployment:
    """What the checks read, each loaded once."""

    config: Config
    config_path: str
    limits: Limits
    now: int
    checks: list[str] = field(default_factory=lambda: list(CHECKS))
    build: Build = field(init=False)

    def __post_init__(self) -> None:
        self.build = Build(self.config)

    @property
    def cmd(self) -> str:
        """How the fixes name the config."""
        return f"-c {self.config_path}"

    @cached_property
    def stores(self) -> list[tuple[StateStore, Coverage]]:
        return [(store, store.load()) for store in self.build.state_stores()]

    @cached_property
    def has_output(self) -> bool:
        names = self.build.data.listdir("")
        sink = self.config.sink
        if sink.format == "iceberg" and sink.catalog is None:
            return "catalog.db" in names  # else opening the catalog would create it
        return bool(names)

    @cached_property
    def sql(self) -> duckdb.DuckDBPyConnection | None:
        """DuckDB over the output (etl query's views), or None when there is no output yet."""
        if not self.has_output:
            return None
        return connect(self.config)

    def views(self) -> set[str]:
        return set(views(self.sql)) if self.sql is not None else set()

    def query(self, text: str, parameters: list[object] | None = None) -> list[tuple[Any, ...]]:
        """Rows of a query over the output (there is one: `views` names its tables); a reading problem is
        one StorageError line."""
        assert self.sql is not None, "a query over an output that does not exist"
        try:
            return self.sql.execute(text, parameters or []).fetchall()
        except duckdb.Error as exc:
            raise StorageError(f"cannot read the output: {str(exc).splitlines()[0]}") from None


def shard_of(store: StateStore) -> Shard | None:
    return Shard.from_folder(store.storage.url.rsplit("/", 1)[-1])


def human(ms: int) -> str:
    """A duration as etl's options write them: 7d, 2d3h, 45m, 30s."""
    seconds = max(0, ms // 1000)
    if seconds >= 86400:
        days, rest = divmod(seconds, 86400)
        return f"{days}d" + (f"{rest // 3600}h" if rest >= 3600 else "")
    if seconds >= 3600:
        hours, rest = divmod(seconds, 3600)
        return f"{hours}h" + (f"{rest // 60}m" if rest >= 60 else "")
    return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
