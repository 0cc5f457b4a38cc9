"""Fetch one window: one request, split in halves while an answer is full."""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np

from etl.client import MonitoringClient
from etl.client.models import Candles, Parameter, Points
from etl.errors import DataError
from etl.model import ParamKind, Series, Window


def _concat(parts: list[Points | Candles]) -> Points | Candles:
    first = parts[0]
    if len(parts) == 1:
        return first
    fields = first.__dataclass_fields__
    return type(first)(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in fields})


async def _series(client: MonitoringClient, window: Window, start: int, end: int, count: int) -> Points | Candles:
    source = "calculated" if window.kind is ParamKind.CALCULATED else "physical"
    meta = {"type": "signal"} if window.kind is ParamKind.SIGNAL else {}
    param = Parameter(window.param_id, source, window.object_id, meta)
    return await client.series(param, window.series.value, start, end, count=count)


async def _fetch(client: MonitoringClient, window: Window, start: int, end: int, max_points: int,
                 counters: Counter) -> list[Points | Candles]:
    """[start, end] as the server gives it (both ends included). An answer with `max_points` points may
    be cut: split and refetch."""
    data = await _series(client, window, start, end, max_points)
    counters["requests"] += 1
    if len(data) < max_points or window.kind is ParamKind.SIGNAL and window.series is Series.RAW:
        return [data]  # /db/signal takes no count: its answers are never cut
    if end - start < 2:
        raise DataError(f"parameter {window.param_id} {window.series}: more than {max_points} points within "
                        "1 ms; raise extract.max_points")
    counters["splits"] += 1
    middle = start + (end - start) // 2
    first, second = await asyncio.gather(
        _fetch(client, window, start, middle, max_points, counters),
        _fetch(client, window, middle, end, max_points, counters),
    )
    # Both halves hold the point at `middle` (inclusive bounds): the first half gives it up.
    return [_before(part, middle) for part in first] + second


def _before(data: Points | Candles, bound: int) -> Points | Candles:
    keep = data.ts < bound
    if keep.all():
        return data
    return type(data)(**{f: getattr(data, f)[keep] for f in data.__dataclass_fields__})


async def fetch_window(client: MonitoringClient, window: Window, max_points: int, counters: Counter) -> Points | Candles:
    """Every point the server has for the window (its end included: the caller drops it)."""
    start, end = window.request()
    return _concat(await _fetch(client, window, start, end, max_points, counters))
