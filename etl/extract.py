"""Fetch work units: one request per unit, split in halves while an answer is full."""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np

from etl.client import MonitoringClient
from etl.client.models import Candles, Points
from etl.errors import DataError
from etl.plan import WorkUnit
from etl.transform import UnitData, clean


def _concat(parts: list[Points | Candles]) -> Points | Candles:
    first = parts[0]
    if len(parts) == 1:
        return first
    fields = first.__dataclass_fields__
    return type(first)(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in fields})


async def fetch_window(
    client: MonitoringClient, unit: WorkUnit, start: int, end: int, max_points: int, counters: Counter
) -> list[Points | Candles]:
    """[start, end) of one unit. The closing bound is sent inclusively, because servers differ on it;
    points at `end` are dropped later. An answer with `max_points` points may be cut: split and refetch."""
    data = await client.series(unit.param, unit.series, start, end, count=max_points)
    counters["requests"] += 1
    if len(data) < max_points or unit.param.kind == "signal" and unit.series == "raw":
        return [data]  # /db/signal takes no count: its answers are never cut
    if end - start < 2:
        raise DataError(
            f"parameter {unit.param.id} {unit.series}: more than {max_points} points within 1 ms; "
            "raise extract.max_points"
        )
    counters["splits"] += 1
    middle = start + (end - start) // 2
    first, second = await asyncio.gather(
        fetch_window(client, unit, start, middle, max_points, counters),
        fetch_window(client, unit, middle, end, max_points, counters),
    )
    # Both halves hold the point at `middle` (inclusive bounds): the first half gives it up.
    return [_before(part, middle) for part in first] + second


def _before(data: Points | Candles, bound: int) -> Points | Candles:
    keep = data.ts < bound
    if keep.all():
        return data
    return type(data)(**{f: getattr(data, f)[keep] for f in data.__dataclass_fields__})


async def fetch_unit(client: MonitoringClient, unit: WorkUnit, max_points: int, counters: Counter) -> UnitData:
    parts = await fetch_window(client, unit, unit.start, unit.end, max_points, counters)
    return clean(unit, _concat(parts), counters)
