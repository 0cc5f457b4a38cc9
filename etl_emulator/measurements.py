"""Handlers of the measurement endpoints (raw, average and candle series), parameter status and
setvalue, over the generator plus the points setvalue added. Answers whose points all lie before the
clock (and have settled: lateness.py) never change, so the bodies of repeated windows are kept in a
bounded LRU cache."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import orjson

from etl_emulator import records, series
from etl_emulator.answers import Answer, bad, not_found
from etl_emulator.catalog import visible_param
from etl_emulator.dataset import DAY_MS, Dataset, Param
from etl_emulator.encode import encode_candles, encode_points, iso_strings
from etl_emulator.faults import FaultPlan
from etl_emulator.hostile import hostile_body
from etl_emulator.routing import Call
from etl_emulator.state import Clock

COUNT_MAX = 100_000  # a larger count is served as this one, silently (unless faults.count_reject_over)
CACHE_MAX_BYTES = 256 * 1024 * 1024
CACHE_MAX_ENTRY = 16 * 1024 * 1024
SEEN_MAX = 100_000
# An answer's cache key: source, series kind, param_id, start, end, count, the param's setvalue version.
CacheKey = tuple[str, str, int, int, int, int | None, int]
# Raw (ts, values) -> the columns of one series (average: ts, value; candles: ts, open, high, low, close).
Aggregate = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, ...]]


class Measurements:
    """The series, status and setvalue endpoints over one dataset and clock."""

    def __init__(self, dataset: Dataset, clock: Clock, plan: FaultPlan) -> None:
        self.dataset = dataset
        self.clock = clock
        self.plan = plan
        self.overlay: dict[int, dict[int, float]] = {}  # param -> {ts: value} from setvalue
        self.overlay_version: dict[int, int] = {}  # part of the cache key of the param's series
        self.cache: OrderedDict[CacheKey, bytes] = OrderedDict()
        self.cache_bytes = 0
        self.seen: OrderedDict[CacheKey, None] = OrderedDict()  # keys asked for once: cached on the 2nd ask

    def _raw(self, p: Param, lo: int, hi: int, now: int) -> tuple[np.ndarray, np.ndarray]:
        """Generated points in [lo, hi] (none after now) merged with the setvalue points."""
        ts, values = series.raw_series(self.dataset, p.id, lo, hi, now)
        extra = self.overlay.get(p.id)
        if extra:
            cap = min(hi, now)
            added = sorted((t, v) for t, v in extra.items() if lo <= t <= cap)
            if added:
                ats = np.array([t for t, _ in added], np.int64)
                keep = ~np.isin(ts, ats)
                ts = np.concatenate([ts[keep], ats])
                values = np.concatenate([values[keep], np.array([v for _, v in added], np.float64)])
                order = np.argsort(ts, kind="stable")
                ts, values = ts[order], values[order]
        return ts, values

    def series(self, call: Call, *, source: str, kind: str) -> Answer:
        param_id, start, end = call.args
        p = visible_param(self.dataset, call, param_id)
        if (source == "calculated") != (p.kind == "calculated"):
            raise not_found(f"{source} parameter {param_id}")
        if source == "signal" and p.kind != "signal":
            raise bad(f"parameter {param_id} is not a signal parameter")
        if start > end:
            raise bad(f"the interval start {start} is after its end {end}")
        if kind == "raw" and end - start > DAY_MS:
            raise bad(
                f"raw intervals may span at most 24 hours, this one spans {(end - start) / 3.6e6:.2f} h"
            )
        count = self._count(call, signal=source == "signal")
        now = self.clock.now()
        hostile = call.decision.hostile if call.decision else None
        if hostile == "stuck":  # ignores the start asked: always from the UTC midnight before it
            start -= start % DAY_MS
        lo, hi = (start, end) if kind == "raw" else series.bucket_span(start, end)
        # Answers whose points all lie before the clock, and have all reached the platform with their
        # final values, never change (setvalue bumps the key).
        key = (source, kind, param_id, start, end, count, self.overlay_version.get(param_id, 0))
        late = self.dataset.lateness
        settled = hi <= now and (not late or hi < late.settled(p.id, p.controller_id, now))
        if settled and not hostile and (body := self.cache.get(key)) is not None:
            self.cache.move_to_end(key)
            return Answer(body)
        if kind == "raw":
            ts, values = self._raw(p, lo, hi, now)
            columns = {"ts": ts[:count], "value": values[:count]}
        elif kind == "average":
            b, mean = self._buckets(p, series.average_of, lo, hi, now, count)
            columns = {"ts": b, "value": mean}
        else:
            b, o, h, low, c = self._buckets(p, series.candles_of, lo, hi, now, count)
            columns = {"ts": b, "open": o, "close": c, "low": low, "high": h}
        if hostile:
            return hostile_body(
                hostile,
                call.faults.salt,
                param_id,
                columns,
                kind == "candles",
                start,
                end,
                self.plan.faults.bomb_mb,
            )
        if kind == "candles":
            body = encode_candles(
                param_id, columns["ts"], columns["open"], columns["high"], columns["low"], columns["close"]
            )
        else:
            body = encode_points(param_id, columns["ts"], columns["value"])
        if settled and len(body) <= CACHE_MAX_ENTRY:
            self._cache_put(key, body)
        return Answer(body)

    def _count(self, call: Call, *, signal: bool) -> int | None:
        """How many points or buckets the answer holds at most (None: all)."""
        f = self.plan.faults
        if signal:  # takes no count, but a server's cap still applies
            return f.max_count
        count = call.integer("count", f.count_default)
        if count < 1:
            raise bad("count must be at least 1")
        if f.count_reject_over is not None and count > f.count_reject_over:
            raise bad(f"count may be at most {f.count_reject_over}, got {count}")
        return min(count, COUNT_MAX, f.max_count or COUNT_MAX)

    def _buckets(
        self, p: Param, aggregate: Aggregate, lo: int, hi: int, now: int, count: int | None
    ) -> list[np.ndarray]:
        """The first `count` buckets of [lo, hi], computed a slab at a time: aggregate windows have no
        length limit, so memory stays bounded and the work stops once `count` buckets are found."""
        slab = max(1, p.period_ms * 200_000 // series.BUCKET_MS) * series.BUCKET_MS
        parts = [aggregate(*self._raw(p, lo, lo - 1, now))]  # typed empty columns
        found = 0
        for first in range(lo, min(hi, now) + 1, slab):
            parts.append(aggregate(*self._raw(p, first, min(first + slab - 1, hi), now)))
            found += len(parts[-1][0])
            if count is not None and found >= count:
                break
        return [np.concatenate(column)[:count] for column in zip(*parts, strict=True)]

    def _cache_put(self, key: CacheKey, body: bytes) -> None:
        # One-off windows (a pipeline reads each once) would only churn memory: cache repeats.
        if key not in self.seen:
            self.seen[key] = None
            if len(self.seen) > SEEN_MAX:
                self.seen.popitem(last=False)
            return
        self.cache[key] = body
        self.cache_bytes += len(body)
        while self.cache_bytes > CACHE_MAX_BYTES:
            self.cache_bytes -= len(self.cache.popitem(last=False)[1])

    def param_state(self, call: Call) -> bytes:
        p = visible_param(self.dataset, call, call.args[0])
        if not p.physical:
            raise not_found(f"physical parameter {p.id}")
        now = self.clock.now()
        at = min(call.integer("time", now), now)
        ts, values = self._raw(p, at - records.status_lookback_ms(p), at, now)
        return orjson.dumps(records.status_of(p, float(values[-1]) if len(values) else None))

    def set_value(self, call: Call) -> bytes:
        p = visible_param(self.dataset, call, call.args[0])
        if not p.physical:
            raise not_found(f"physical parameter {p.id}")
        call.user.require_control()
        raw = call.one("value")
        try:
            value = float(raw or "")
        except ValueError:
            raise bad(f"value must be a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise bad("value must be finite")
        if p.kind == "signal" and value not in (0.0, 1.0):
            raise bad(f"parameter {p.id} is a signal parameter: value must be 0 or 1")
        now = self.clock.now()
        self.overlay.setdefault(p.id, {})[now] = value
        self.overlay_version[p.id] = self.overlay_version.get(p.id, 0) + 1
        return orjson.dumps({"id": p.id, "value": value, "timestmp": iso_strings(np.array([now]))[0]})
