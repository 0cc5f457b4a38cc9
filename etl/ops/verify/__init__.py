"""`etl verify`: stored windows read again from the platform and compared row for row with the output;
`--repair` rewrites those that differ as a run would, then reads them again.

    sample.py   which windows: what the checkpoints claim, settled, cut as a run cuts it; the sample
    read.py     the output's rows of a group of windows (files, or a lake table's snapshot)
    compare.py  one window, row for row
    check.py    the windows fetched and compared, a group at a time, within --max-requests
    result.py   the figures, the differing windows, the verdict, the record's form
    render.py   the HTML page
    metrics.py  the metrics file

Verify reads through the client a run builds (its capacity limit, retries and redaction) and takes no
lock: runs go on beside it. A repair is a run (etl/pipeline/coordinator.py, `RunOptions.work`): under
the run lock, scoped to the config's source, each slab's files swapped in or its lake commit made whole,
checkpointed after; a repair killed part-way leaves each window as it was or repaired.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from etl.client import ClientStats
from etl.config import Config
from etl.dataset import verified
from etl.errors import ConfigError, EtlError, RequestsSpent
from etl.model import Params, Shard, union
from etl.ops.verify.check import compare_windows
from etl.ops.verify.read import OutputReader
from etl.ops.verify.result import Result, Work
from etl.ops.verify.sample import Candidates, Sample, Scope, candidates
from etl.pipeline.build import Build
from etl.pipeline.coordinator import RunOptions
from etl.pipeline.discover import discover
from etl.pipeline.loop import in_a_loop
from etl.pipeline.plan import horizon, spans_for
from etl.pipeline.run import execute
from etl.pipeline.summary import record_id
from etl.state import Coverage
from etl.state.arrivals import Arrivals
from etl.storage import spools
from etl.support import allocator, redact
from etl.timeutil import iso, now_ms

__all__ = ["Result", "VerifyOptions", "verify"]


@dataclass(frozen=True)
class VerifyOptions:
    start: int | None = None  # default: window.start
    end: int | None = None  # default: the window's end, cut at the server's clock
    sample: float = 1.0  # the share of the candidate windows read again (1: all of them)
    seed: int | None = None  # None: a new one, which the result gives
    max_requests: int | None = None  # the most the comparisons send, sign-in and listing included
    repair: bool = False
    shard: Shard | None = None


# What a pass compares: (config, coverage, arrivals, fleet, start, end, now) -> candidates and their scope.
Choose = Callable[[Config, Coverage, Arrivals, Params, int, int, int], tuple[list[Candidates], Scope]]


def verify(config: Config, options: VerifyOptions) -> Result:
    """Compare a sample of the output with the source (and repair what differs, with `options.repair`);
    the record is kept in `_verify/` whatever the verdict."""
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    build = Build(config, options.shard)
    result = Result(
        record_id(),
        config.source.name,
        build.data.display(),
        sample=options.sample,
        seed=seed,
        shard=str(options.shard) if options.shard else None,
        max_requests=options.max_requests,
    )
    started = time.monotonic()
    with spools.held():
        in_a_loop(_compare(build, options, result, candidates, options.max_requests))
        if options.repair and result.differing:
            _repair(config, options, result)
    result.seconds, result.finished = time.monotonic() - started, now_ms()
    verified.save(build, result.as_dict())
    return result


async def _compare(
    build: Build, options: VerifyOptions, result: Result, choose: Choose, budget: int | None
) -> None:
    """One pass: sign in, list the fleet, draw the windows `choose` gives, compare them into `result`."""
    config = build.config
    store = build.state_store()
    coverage = store.load()
    stats = ClientStats()
    async with build.client(stats, max_requests=budget) as client:
        try:
            await client.sign_in()
            server_now = client.server_now()
            fleet = (await discover(client, config.select)).params.of_shard(options.shard)
            allocator.trim()  # the listing's pages and records are let go
        except RequestsSpent:
            raise ConfigError(
                f"--max-requests {result.max_requests}: spent before the parameters were listed "
                f"({stats.requests} request(s): sign-in and listing); allow more"
            ) from None
        now = horizon(server_now)
        start = config.window.start_ms if options.start is None else options.start
        end = min(config.window.end_ms(now) if options.end is None else options.end, now)
        if start >= end:
            raise ConfigError(
                f"nothing to verify: the window starts at {iso(start)}, not before its end {iso(end)}"
            )
        found, scope = choose(config, coverage, store.arrivals, fleet, start, end, now)
        drawn = Sample(found, fleet, options.sample, result.seed)
        result.start, result.end, result.unsettled, result.unlisted = (
            start,
            end,
            scope.unsettled,
            scope.unlisted,
        )
        result.candidates += drawn.candidates
        result.sampled += drawn.size
        try:
            await compare_windows(
                client, OutputReader(build, build.buckets), drawn.spans(), result, config.extract
            )
        finally:
            result.requests += stats.requests


def _repair(config: Config, options: VerifyOptions, result: Result) -> None:
    """The differing windows fetched and replaced by a run, then compared again."""
    work = result.work()
    start = min(int(w[1].min()) for w in work.values())
    end = max(int(w[2].max()) for w in work.values())
    run = RunOptions(start=start, end=end, shard=options.shard, progress=False, work=work)
    result.repaired = {"windows": result.differing, "run_id": None, "differing": result.differing}
    try:
        summary = execute(config, run)
    except EtlError as exc:  # the verify's record and verdict say it, with the run's exit code
        if exc.summary is not None:
            result.repaired["run_id"] = exc.summary.run_id
        result.repaired.update(error=redact.redact(str(exc)), exit_code=exc.exit_code)
        return
    result.repaired["run_id"] = summary.run_id
    budget = None if options.max_requests is None else options.max_requests - result.requests
    again = Result(result.verify_id, result.source, result.output, seed=result.seed, max_requests=budget)
    build = Build(config, options.shard)  # the tables' snapshots as the repair left them
    pass_options = VerifyOptions(start=start, end=end, shard=options.shard)
    try:
        if budget is not None and budget <= 0:
            raise RequestsSpent("no request left")
        in_a_loop(_compare(build, pass_options, again, _windows_of(work), budget))
    except (RequestsSpent, ConfigError):  # --max-requests spent before the listing: not read again
        again.not_verified = result.differing - again.verified
    result.requests += again.requests
    result.repaired.update(
        differing=again.differing,
        verified=again.verified,
        not_verified=again.not_verified,
        failed=again.failed,
    )


def _windows_of(work: Work) -> Choose:
    """The repaired windows, as the candidates of the pass that reads them again."""

    def choose(
        config: Config,
        _coverage: Coverage,
        _arrivals: Arrivals,
        fleet: Params,
        start: int,
        end: int,
        _now: int,
    ) -> tuple[list[Candidates], Scope]:
        spans = spans_for(config.extract.raw_window, config.extract.aggregate_window)
        found = []
        for series, (pids, starts, ends) in work.items():
            listed = np.isin(pids, fleet.id)
            found.append(
                Candidates(series, spans[series], *union(pids[listed], starts[listed], ends[listed]))
            )
        return found, Scope(start, end, 0, 0)

    return choose
