"""One slab of work, from requests to durable files: the unit every executor runs.

`process_slab` fetches a slab's windows, turns them into one table and rewrites the slab's partitions.
It commits no checkpoint: the coordinator does, once the result says the files are written. Besides the
client, its input (`SlabJob`: config, slab, writer label) and its result are plain picklable data, so
`run_slab` can run it on a Dask worker with a client of its own. A slab is the natural unit: its
partitions are disjoint from every other slab's, so slabs are written independently and a slab redone
after a crash or a lost worker replaces exactly what it wrote before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field

import httpx

from etl.client import ClientStats, MonitoringClient, RetryPolicy
from etl.config import Config
from etl.errors import ExitCode
from etl.extract import fetch_unit
from etl.plan import Slab
from etl.sinks import DatasetWriter, Replaced, file_format
from etl.storage import Storage
from etl.timeutil import iso
from etl.transform import UnitData, to_table

log = logging.getLogger("etl")


def make_client(config: Config, stats: ClientStats | None = None) -> MonitoringClient:
    source = config.source
    return MonitoringClient(
        source.base_url,
        source.username,
        source.resolve_password(),
        sign_in=source.sign_in,
        timeout=httpx.Timeout(source.read_timeout, connect=source.connect_timeout),
        retry=RetryPolicy(**config.retry.model_dump()),
        max_in_flight=config.extract.concurrency,
        verify=source.tls_verify(),
        stats=stats,
    )


@dataclass(frozen=True)
class SlabJob:
    config: Config
    slab: Slab
    label: str = "0"  # writer label: the slab's files are part-{label}.{ext}

    def __repr__(self) -> str:  # Dask prints task arguments when a task fails: no config in there
        return f"SlabJob({self.slab.series} from {iso(self.slab.start)}, {len(self.slab.units)} windows)"


@dataclass(frozen=True)
class WindowFailure:
    param_id: int
    series: str
    start: int
    end: int
    message: str
    exit_code: int
    fatal: bool
    error: BaseException | None = field(default=None, compare=False)  # the original, in-process only

    def describe(self) -> str:
        return f"param {self.param_id} {self.series} {iso(self.start)}..{iso(self.end)}: {self.message}"


@dataclass
class SlabResult:
    series: str
    done: list[tuple[int, int, int]] = field(default_factory=list)  # (param_id, start, end) written
    failures: list[WindowFailure] = field(default_factory=list)
    windows: int = 0  # planned
    points: int = 0
    files: list[str] = field(default_factory=list)
    counters: Counter = field(default_factory=Counter)
    client: ClientStats | None = None  # the counts of a task's own client (run_slab)

    def detached(self) -> SlabResult:
        """Without exception objects: many cannot be unpickled in another process."""
        return dataclasses.replace(self, failures=[dataclasses.replace(f, error=None) for f in self.failures])


def dataset_writer(config: Config, series: str, label: str = "0") -> DatasetWriter:
    storage = Storage(config.sink.path, config.sink.storage_options)
    fmt = file_format(config.sink.format, config.sink.compression)
    return DatasetWriter(storage, series, fmt, list(config.sink.partition_by), label)


async def process_slab(job: SlabJob, client: MonitoringClient) -> SlabResult:
    """Fetch every window of the slab, then write those that succeeded; failed ones stay open."""
    slab = job.slab
    counters: Counter = Counter()
    fetched = await asyncio.gather(
        *(fetch_unit(client, u, job.config.extract.max_points, counters) for u in slab.units), return_exceptions=True
    )
    result = SlabResult(slab.series, windows=len(slab.units), counters=counters)
    good: list[UnitData] = []
    for unit, outcome in zip(slab.units, fetched, strict=True):
        if isinstance(outcome, UnitData):
            good.append(outcome)
        elif isinstance(outcome, Exception):
            code = getattr(outcome, "exit_code", ExitCode.INTERNAL)
            result.failures.append(
                # Each error class says whether fetching more is pointless; anything else is a bug.
                WindowFailure(unit.param.id, unit.series, unit.start, unit.end, str(outcome), code,
                              getattr(outcome, "fatal", True), outcome)
            )
        else:
            raise outcome  # CancelledError and friends
    if good:
        writer = dataset_writer(job.config, slab.series, job.label)
        table = await asyncio.to_thread(to_table, slab.series, good)
        ranges = [Replaced(g.unit.param.id, g.unit.param.object_id, g.unit.start, g.unit.end) for g in good]
        result.files = await asyncio.to_thread(writer.write, table, ranges)
        result.done = [(g.unit.param.id, g.unit.start, g.unit.end) for g in good]
        result.points = table.num_rows
    return result


def run_slab(job: SlabJob) -> SlabResult:
    """The Dask task: process_slab with a client of its own (one sign-in per slab)."""

    async def go() -> SlabResult:
        stats = ClientStats()
        async with make_client(job.config, stats) as client:
            result = await process_slab(job, client)
        result.client = stats
        return result.detached()

    return asyncio.run(go())
