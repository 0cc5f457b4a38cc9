"""What watches a run from outside (lineage events, traces): `etl.run` tells each observer when the run
starts and when it ends, with its `RunSummary`. An integration's module, and the library it needs, loads
only when the config or the environment asks for it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from etl.config import Config
from etl.errors import ConfigError
from etl.support.trace import Trace

if TYPE_CHECKING:
    from etl.pipeline.coordinator import RunOptions
    from etl.pipeline.summary import RunSummary

log = logging.getLogger("etl")


class RunObserver(Protocol):
    # The spans the run's stages open (etl/support/trace.py), for an observer that keeps them
    trace: Trace | None

    def started(self, summary: RunSummary, options: RunOptions) -> None:
        """The run has its id and is about to take its lock."""

    def ended(self, summary: RunSummary, error: BaseException | None) -> None:
        """The run is over: `error` None when it succeeded, else what it raised."""


@dataclass(frozen=True)
class ParentRun:
    """The orchestrator's run (a Dagster run, an Airflow task instance) that started this one."""

    namespace: str
    name: str
    run_id: str  # a UUID
    root: ParentRun | None = None

    @classmethod
    def parse(cls, text: str | None, root: str | None = None) -> ParentRun | None:
        """`namespace/name/run_id`, the form of OPENLINEAGE_PARENT_ID and of Airflow's
        `lineage_parent_id` macro (the namespace may hold slashes); None when it is not that."""
        parts = (text or "").strip().rsplit("/", 2)
        if len(parts) != 3 or not all(parts):
            return None
        namespace, name, run_id = parts
        return cls(namespace, name, run_id, root=cls.parse(root))


_parent: ContextVar[ParentRun | None] = ContextVar("etl_parent_run", default=None)


@contextmanager
def parent_run(parent: ParentRun | None) -> Iterator[None]:
    """Runs started inside name `parent` as the run that started them (etl.dagster does)."""
    token = _parent.set(parent)
    try:
        yield
    finally:
        _parent.reset(token)


def parent() -> ParentRun | None:
    """The run that started this one: `parent_run`'s, else OPENLINEAGE_PARENT_ID's (with
    OPENLINEAGE_ROOT_PARENT_ID), as an orchestrator passes them to a task's process."""
    return _parent.get() or ParentRun.parse(
        os.environ.get("OPENLINEAGE_PARENT_ID"), os.environ.get("OPENLINEAGE_ROOT_PARENT_ID")
    )


def lineage_from_environment() -> bool:
    """Whether the environment configures the OpenLineage client (as Airflow's provider reads it)."""
    env = os.environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    return bool(
        env.get("OPENLINEAGE_URL")
        or env.get("OPENLINEAGE_CONFIG")
        or any(name.startswith("OPENLINEAGE__TRANSPORT") for name in env)
    )


def observers(config: Config) -> list[RunObserver]:
    """The observers the config (or, for lineage, the environment) asks for. A `lineage:` or
    `telemetry:` section without its package is a ConfigError; the environment alone without it, a
    warning."""
    found: list[RunObserver] = []
    section = config.lineage
    if section.enabled if section is not None else lineage_from_environment():
        try:
            from etl.pipeline.lineage import Lineage
        except ConfigError:
            if section is not None:
                raise
            log.warning(
                "OPENLINEAGE_* is set, but lineage needs openlineage-python: pip install 'etl[lineage]'"
            )
        else:
            found.append(Lineage(config, parent()))
    if config.telemetry is not None:
        from etl.pipeline.telemetry import Telemetry

        found.append(Telemetry(config))
    return found


def trace_of(watching: list[RunObserver]) -> Trace | None:
    """The trace the run's stages report to: the first observer's that keeps one."""
    return next((o.trace for o in watching if o.trace is not None), None)
