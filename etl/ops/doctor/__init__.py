"""`etl doctor`: checks of a deployment, each a small function returning findings. Nothing is changed: the
checks read the config, the state, the run records and the output, and (unless asked not to) probe the
server as `etl init` does.

    server               the probes of etl/ops/probe.py, compared with the config
    checkpoints.now      checkpoints that reach past now (a clock or window.end in the future)
    checkpoints.source   the last checkpointed day of a few parameters, stored vs what the server has now
    runs.last            the last runs' outcome and failed windows, from _runs/*.json
    runs.age             the age of the last successful run, against --max-age
    runs.late            how late the last runs found points to be; parameters quiet past window.late_max
    runs.verify          the last `etl verify`: when, and whether the output equalled the source
    locks                a state lock held by a run that is gone
    leftovers.temp       temp files of killed runs in the output; leftovers.spool: spools in the temp folder
    files                Parquet/CSV partitions holding more files than sink.buckets
    lake.*               lake tables: data files per partition, metadata size, versions past the retention
    sources              several source names in one output that list the same objects

A check that depends on another part's internals (where spools live, lake statistics) is one small
function here, so it moves with that part.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from etl.config import Config
from etl.errors import EtlError
from etl.ops.doctor.deployment import CHECKS, Deployment, Diagnosis, Limits
from etl.ops.doctor.output import lake_tables, partition_files, postgres_tables, sources, spools, temp_files
from etl.ops.doctor.server import server_checks
from etl.ops.doctor.state import checkpoints_ahead_of_now, last_verify, locks, runs
from etl.ops.findings import Finding, fail
from etl.timeutil import now_ms

__all__ = ["CHECKS", "Deployment", "Diagnosis", "Limits", "diagnose", "locks"]


def _guarded(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    """A check that cannot read what it needs says so as its finding, and the others still run."""
    try:
        return run()
    except EtlError as exc:
        return [fail(check, f"could not check: {exc}")]


def diagnose(
    config: Config,
    config_path: str,
    limits: Limits | None = None,
    *,
    server: bool = True,
    skip: tuple[str, ...] = (),
    now: int | None = None,
) -> Diagnosis:
    """Every check of a deployment but those skipped; `server`: probe the server too."""
    d = Deployment(config, config_path, limits or Limits(), now if now is not None else now_ms())
    d.checks = [c for c in CHECKS if c not in skip]
    findings: list[Finding] = []
    requests = 0
    if "checkpoints" in d.checks or "locks" in d.checks:
        try:
            d.stores  # noqa: B018 - loaded once, here, so a damaged state is one finding
        except EtlError as exc:
            findings.append(fail("checkpoints", f"cannot read the state: {exc}"))
            d.checks = [c for c in d.checks if c not in ("checkpoints", "locks")]
    if server and "server" in d.checks:
        found, requests = asyncio.run(server_checks(d))
        findings += found
    runs_by_check: dict[str, list[Callable[[Deployment], list[Finding]]]] = {
        "checkpoints": [checkpoints_ahead_of_now],
        "runs": [runs, last_verify],
        "locks": [locks],
        "leftovers": [temp_files, spools],
        "files": [] if config.sink.lake else [partition_files],
        "lake": [postgres_tables]
        if config.sink.format == "postgres"
        else [lake_tables]
        if config.sink.lake and d.has_output
        else [],
        "sources": [sources],
    }
    for check in d.checks:
        for fn in runs_by_check.get(check, []):
            findings += _guarded(check, functools.partial(fn, d))
    return Diagnosis(findings, requests)
