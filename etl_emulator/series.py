"""The series generator: raw points and their 30-minute aggregates, as pure, vectorised functions
of (dataset, parameter id, time).

Any window, fetched in any order, from any emulator with the same settings, gives the same points.
Tests import these functions to recompute exactly what the server answers:

    ds = Dataset(seed=7, objects=2, params_per_object=3, calc_per_object=1)
    ts, values = raw_series(ds, 1001, start_ms, end_ms)

Sampling of one parameter with period P (whole seconds, drawn from `period_range`):
point k is at k*P + jitter_k ms, jitter_k in [0, P/2) hashed from (seed, param, k), so times are
irregular, strictly increasing and computable for any window without history. Each UTC day has
one gap of 15 to 90 minutes at a hashed time. Analog and calculated values are a daily cycle
in the object's local time (by whole second) plus hashed noise, rounded to 3 decimals; signal values
are 0.0/1.0, constant over blocks of 5 to 60 minutes.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from etl_emulator.dataset import (
    DAY_MS,
    GAP_AT_SALT,
    GAP_LEN_SALT,
    HOUR_MS,
    SECOND_MS,
    Param,
    as_dataset,
    hash_stream,
    require,
    stream_key,
)

BUCKET_MS = 30 * 60_000


@functools.lru_cache(maxsize=65536)
def _daily_gap(key: int, day: int) -> tuple[int, int]:
    """[start, end) of a parameter's gap on a UTC day (epoch day number)."""
    at = stream_key(key, GAP_AT_SALT, day) % (DAY_MS - 90 * 60_000)
    length = (15 + stream_key(key, GAP_LEN_SALT, day) % 76) * 60_000
    return day * DAY_MS + at, day * DAY_MS + at + length


def gaps(dataset: Any, param_id: int, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
    """The [start, end) of each daily gap of a parameter that overlaps [start_ms, end_ms]: the only
    times a parameter is silent, documented so that tests and users can check completeness figures."""
    key = require(dataset, param_id).key
    spans = (_daily_gap(key, day) for day in range(start_ms // DAY_MS, end_ms // DAY_MS + 1))
    return [(lo, hi) for lo, hi in spans if lo <= end_ms and hi > start_ms]


def _times(p: Param, start_ms: int, end_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """(t_k, hash_k) of every sample in [start, end], daily gaps removed. The low 32 bits of hash_k
    give the jitter, the high 32 bits the noise."""
    period = p.period_ms
    k = np.arange(start_ms // period - 1, end_ms // period + 1, dtype=np.int64)
    h = hash_stream(p.sample_key, k)
    t = (h & np.uint64(0xFFFFFFFF)) % np.uint64(period // 2)
    t = t.astype(np.int64)
    t += k * period
    first, last = np.searchsorted(t, start_ms, "left"), np.searchsorted(t, end_ms, "right")
    t, h = t[first:last], h[first:last]
    bounds = [b for day in range(start_ms // DAY_MS, end_ms // DAY_MS + 1) for b in _daily_gap(p.key, day)]
    cuts = np.searchsorted(t, bounds).tolist()
    if all(a == b for a, b in zip(cuts[::2], cuts[1::2], strict=True)):
        return t, h
    keep = np.ones(len(t), dtype=bool)
    for a, b in zip(cuts[::2], cuts[1::2], strict=True):  # one slice per day, not per point
        keep[a:b] = False
    return t[keep], h[keep]


# The daily cycle by second of the local day: lowest before dawn, highest mid-afternoon.
_CYCLE = -np.cos(np.arange(86400) * (2 * np.pi / 86400) - np.pi / 6)


def _values(p: Param, t: np.ndarray, h: np.ndarray) -> np.ndarray:
    if p.kind == "signal":
        block = (t + p.tz * HOUR_MS) // p.block_ms
        held: np.ndarray = ((hash_stream(p.block_key, block) & np.uint64(3)) == 0).astype(np.float64)
        return held
    x = _CYCLE.take((t // SECOND_MS + p.tz * 3600) % 86400)
    x *= p.amp
    x += p.base - p.amp * p.noise
    x += (h >> np.uint64(32)).astype(np.float64) * (2 * p.amp * p.noise / (1 << 32))
    rounded: np.ndarray = np.round(x, 3, out=x)
    return rounded


def raw_series(
    dataset: Any, param_id: int, start_ms: int, end_ms: int, now_ms: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Raw points of a parameter: (ts epoch ms int64, values float64), ascending, with
    start_ms <= ts <= end_ms, as the platform shows them at now_ms when given (none after it, none
    that have not reached it yet, preliminary values not yet revised: see lateness.py); with no
    clock, every point with its final value. `dataset`: see as_dataset."""
    ds = as_dataset(dataset)
    p = require(ds, param_id)
    late = ds.lateness
    if now_ms is not None:
        end_ms = min(end_ms, late.shown_until(p.id, now_ms) if late else now_ms)
    if end_ms < start_ms:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    t, h = _times(p, int(start_ms), int(end_ms))
    if late and (absent := late.absent(p.id, p.object_id, t)) is not None:
        t, h = t[~absent], h[~absent]
    if now_ms is not None and late:
        hidden = late.hidden(p.controller_id, t, now_ms)
        if hidden is not None:
            t, h = t[~hidden], h[~hidden]
    values = _values(p, t, h)
    if now_ms is not None and late:
        early = late.preliminary(p.id, t, now_ms)
        if early is not None:
            values[early] = _preliminary(p, values[early], h[early])
    return t, values


def _preliminary(p: Param, final: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A value before its recalculation: off the final one by 1% to 10% of the amplitude, either way."""
    off = ((h >> np.uint64(40)) & np.uint64(0xFFFF)).astype(np.float64) / 0xFFFF  # [0, 1]
    sign = np.where((h >> np.uint64(39)) & np.uint64(1), 1.0, -1.0)
    return np.round(final + sign * p.amp * (0.01 + 0.09 * off), 3)


def bucket_span(start_ms: int, end_ms: int) -> tuple[int, int]:
    """[lo, hi] of the raw points behind the buckets whose start b has start <= b <= end."""
    first = -(-start_ms // BUCKET_MS) * BUCKET_MS
    last = end_ms // BUCKET_MS * BUCKET_MS
    return first, last + BUCKET_MS - 1


def bucket_groups(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bucket start of each non-empty bucket, index of its first point) for ascending ts."""
    buckets = ts // BUCKET_MS
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]]) if len(ts) else np.empty(0, np.int64)
    return buckets[starts] * BUCKET_MS, starts


def average_of(ts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """30-minute UTC bucket means of ascending raw points: (bucket starts, means)."""
    b, starts = bucket_groups(ts)
    if not len(b):
        return b, np.empty(0, np.float64)
    counts = np.diff(np.r_[starts, len(ts)])
    return b, np.add.reduceat(values, starts) / counts


def candles_of(ts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """30-minute UTC bucket candles of ascending raw points: (bucket starts, open, high, low, close)."""
    b, starts = bucket_groups(ts)
    if not len(b):
        empty = np.empty(0, np.float64)
        return b, empty, empty, empty, empty
    ends = np.r_[starts[1:], len(ts)] - 1
    return (
        b,
        values[starts],
        np.maximum.reduceat(values, starts),
        np.minimum.reduceat(values, starts),
        values[ends],
    )


def average_series(
    dataset: Any, param_id: int, start_ms: int, end_ms: int, now_ms: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(bucket starts, means): buckets b (UTC, 30 min) with start <= b <= end, mean of the raw
    points in [b, b + 30 min) (none later than now_ms), empty buckets left out."""
    lo, hi = bucket_span(start_ms, end_ms)
    return average_of(*raw_series(dataset, param_id, lo, hi, now_ms))


def candles_series(
    dataset: Any, param_id: int, start_ms: int, end_ms: int, now_ms: int | None = None
) -> tuple[np.ndarray, ...]:
    """(bucket starts, open, high, low, close) over the buckets of average_series."""
    lo, hi = bucket_span(start_ms, end_ms)
    return candles_of(*raw_series(dataset, param_id, lo, hi, now_ms))
