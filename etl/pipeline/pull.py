"""A one-off export of one parameter, without a config or checkpoints; chunked and retried like a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from etl.client import MonitoringClient
from etl.errors import ConfigError, StorageError
from etl.model import Param, Series, Window, cut
from etl.pipeline.clean import WindowData, clean, to_table
from etl.pipeline.counts import Counts
from etl.pipeline.fetch import fetch_window
from etl.pipeline.progress import Progress
from etl.sinks import CsvFormat
from etl.timeutil import DAY_MS


async def pull(
    client: MonitoringClient, param: Param, series: Series, start: int, end: int, max_points: int = 10_000
) -> tuple[pa.Table, Counts]:
    counts = Counts()
    step = DAY_MS if series is Series.RAW else 30 * DAY_MS
    windows = [Window(param.id, param.object_id, param.kind, series, s, e) for s, e in cut(start, end, step)]

    progress = Progress(len(windows))

    async def one(window: Window) -> WindowData:
        data = clean(window, await fetch_window(client, window, max_points, counts), counts)
        progress.advance(1, len(data))
        return data

    try:
        pieces = await asyncio.gather(*(one(w) for w in windows))
    finally:
        progress.close()
    # The series endpoints do not say which object or instance a parameter belongs to: no such columns.
    return to_table(series, list(pieces), "").drop_columns(["source", "object_id"]), counts


def save(table: pa.Table, path: Path) -> None:
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise ConfigError(f"output {path}: name it .csv or .parquet")
    try:
        if suffix == ".parquet":
            pq.write_table(table, path, compression="zstd")
        else:
            path.write_bytes(CsvFormat().encode(table))
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or str(exc).splitlines()[0]}") from None
