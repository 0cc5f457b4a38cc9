"""What watches a run from outside (lineage events, traces): `etl.run` tells each observer when the run
starts and when it ends, with its `RunSummary`. An integration's module, and the library it needs, loads
only when the config or the environment asks for it."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Protocol

from etl.config import Config
from etl.errors import ConfigError
from etl.pipeline.parent import parent
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
