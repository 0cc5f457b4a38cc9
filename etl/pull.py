"""A one-off export of one parameter, without a config or checkpoints; chunked and retried like a run."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from etl.client import MonitoringClient
from etl.client.models import Parameter
from etl.errors import ConfigError
from etl.extract import fetch_unit
from etl.plan import WorkUnit
from etl.sinks import CsvFormat
from etl.timeutil import DAY_MS
from etl.transform import to_table


def windows(start: int, end: int, step: int) -> list[tuple[int, int]]:
    out = []
    while start < end:
        boundary = start - start % step + step
        out.append((start, min(end, boundary)))
        start = out[-1][1]
    return out


async def pull(
    client: MonitoringClient, param: Parameter, series: str, start: int, end: int, max_points: int = 10_000
) -> tuple[pa.Table, Counter]:
    counters: Counter = Counter()
    step = DAY_MS if series == "raw" else 30 * DAY_MS
    units = [WorkUnit(param, series, s, e) for s, e in windows(start, end, step)]
    pieces = await asyncio.gather(*(fetch_unit(client, u, max_points, counters) for u in units))
    # The series endpoints do not say which object a parameter belongs to: no object_id column.
    return to_table(series, list(pieces)).drop_columns(["object_id"]), counters


def save(table: pa.Table, path: Path) -> None:
    if path.suffix == ".parquet":
        pq.write_table(table, path, compression="zstd")
    elif path.suffix == ".csv":
        path.write_bytes(CsvFormat().encode(table))
    else:
        raise ConfigError(f"output {path}: name it .csv or .parquet")
