"""A sink's maintenance: each lake run's own upkeep, and `etl compact` / `etl vacuum` for manual use,
holding the state locks so no run writes meanwhile.

Every `etl run` into lake tables ends with `upkeep` (under its run lock, bounded): the tables it wrote
compact at most `sink.compact` day partitions each (days that are over, or with too many small files),
expire versions beyond `sink.versions` or older than `sink.retention`, and at most once a day (or once
per retention, when shorter) delete the files no kept version references once older than the
retention. So a schedule needs no maintenance command.

A lake table may hold several sources' rows, each written by its own runs under its own lock: a source's
compaction merges only files that hold its rows alone, and other sources' runs may commit meanwhile
(the formats' optimistic concurrency). Expiry and the sweep are the whole table's: `etl vacuum` holds
the locks of every source and shard, since a run's files before its commit are in no version yet.

Parquet/CSV datasets (`etl compact`): the rows of foreign files (other shard counts, bucket counts, older
versions) move into the config's layout (etl/sinks/compact.py), and temp files of killed runs are
removed. Lake tables: `etl compact` merges every partition's small files of the source, `etl vacuum`
expires versions older than a retention with the files only they reference; a reader on the current
version (or any version inside the retention) keeps working.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

import orjson

from etl.config import Config
from etl.model import Series
from etl.pipeline.identity import check_layout
from etl.sinks.compact import compact_layout
from etl.sinks.lake.common import LakeTable, Upkeep
from etl.sinks.output import Output
from etl.timeutil import DAY_MS

log = logging.getLogger(__name__)
SWEPT = "swept.json"  # in the state folder: when each table's files were last swept


@dataclass
class Maintenance:
    partitions: int = 0  # datasets: partitions that held files of another layout
    files: dict[str, int] = field(default_factory=dict)  # per dataset or table: files merged away or removed
    temp_files_removed: int = 0
    buckets: int = 0  # datasets: the files per partition compacted into

    @property
    def tables(self) -> int:
        return len(self.files)


def _lake_tables(output: Output) -> list[LakeTable]:
    lake = output.lake
    assert lake is not None
    tables = [lake.series(s) for s in Series] + [lake.quality()]
    tables += [lake.dimension(name) for name in lake.dimension_names()]
    return [t for t in tables if t.exists()]


def compact(config: Config) -> Maintenance:
    """Datasets: every row of the source in the config's layout. Lake tables: small files bin-packed."""
    output = Output(config)
    out = Maintenance()
    with ExitStack() as locks:
        stores = output.state_stores()
        for store in stores:  # every shard's too: none may write meanwhile
            locks.enter_context(store.lock("compact"))
        check_layout(config)  # files moved into another layout than the output's would be read twice
        if config.sink.buckets is not None and output.lake is None:  # a count set anew: kept from now on
            output.decide_buckets(stores[0], 0, existing=True)
        if output.lake is not None:
            for table in _lake_tables(output):
                out.files[table.name] = table.compact(config.source.name)
            return out
        out.temp_files_removed, out.buckets = output.data.remove_temp_files(), output.buckets
        # also series a config no longer selects, and the quality dataset (laid out like the series)
        for layout in [*(output.layout(series) for series in Series), output.quality_layout()]:
            partitions, removed = compact_layout(output.data, output.fmt, layout)
            out.partitions += partitions
            out.files[layout.name] = removed
    return out


def vacuum(config: Config, retain_ms: int) -> Maintenance:
    """Lake tables: versions older than `retain_ms` expired, and the files only they reference deleted,
    under the locks of every source and shard (a run's files before its commit are such files)."""
    output = Output(config)
    out = Maintenance()
    with ExitStack() as locks:
        for store in output.state_stores(every_source=True):
            locks.enter_context(store.lock("vacuum"))
        for table in _lake_tables(output):
            out.files[table.name] = table.vacuum(retain_ms)
    return out


def upkeep(output: Output, horizon: int) -> dict[str, int]:
    """A lake run's upkeep of the tables it wrote (the caller holds the run lock); what it did."""
    lake = output.lake
    assert lake is not None
    retention = output.config.sink.retention
    store = output.state_store()
    swept = _swept(output)
    now = int(time.time() * 1000)
    every = None if retention is None else min(retention, DAY_MS)
    total = Upkeep()
    for table in lake.opened():
        # A table first seen now is swept a period from now: a one-off run does not list its files.
        sweep = every is not None and now - swept.setdefault(table.name, now) >= every
        try:
            done = table.maintain(horizon, sweep, output.config.source.name)
        except Exception as exc:  # noqa: BLE001 - the data is committed and checkpointed: upkeep waits
            log.warning(
                "upkeep of %s skipped: %s",
                table.name,
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
            continue
        total.add(done)
        if sweep:
            swept[table.name] = now
    if swept:
        store.storage.write_atomic(SWEPT, orjson.dumps(swept))
    return asdict(total)


def _swept(output: Output) -> dict[str, int]:
    data = output.state_store().storage.read(SWEPT)
    try:
        return {str(k): int(v) for k, v in orjson.loads(data).items()} if data else {}
    except (orjson.JSONDecodeError, AttributeError, ValueError):
        return {}
