"""A live platform built differently from the emulator: a clock, late points, offline controllers, revised
values, quiet sensors and sites without a controller, over the document's interface
(`../shared/spec/monitoring-api.md`) as a Java/Spring server might serve it. Standard library and numpy
only; it shares nothing with etl or etl_emulator but the document.

    python benchmarks/servers/live.py --port P --now ISO|MS [--base-path /sem-restservices]
        [--objects 8] [--params 32] [--seed 1] [--latency S] [--workers C --service-time T]
        [--max-count 5000] [--fleet FILE.json] [--quiet-share 0.75 --quiet-since DAYS]
        [--no-controller-share 0.1] [--lag-share 0.1 --lag-hours 3] [--revise-share 0.5 --revise-hours 4]

It prints "ready" on stdout once it listens (127.0.0.1). Logins: `demo`/`demo` sees every object,
`viewer`/`viewer` the first half of them; both read, neither may set values or run commands (403).

The fleet (deterministic from the seed, `Fleet` below): object ids from 4,001 up with gaps, one to three
controllers an object (ids from 61,001) with one to three devices each (ids from 230,001); parameter ids
from 700,001 up with gaps, each object's in one run of ids; about 3/4 physical (a few of them signals,
0/1) and 1/4 calculated. Each parameter samples at a fixed period (60, 120, 180, 300, 600 or 900 s) and
its points lie at the epoch multiples of it. Values are integers of hundredths: a daily triangle wave
in the parameter's own phase plus hashed noise (physical), hourly hashed steps (calculated), hashed runs
of 0 and 1 (signals); served as decimals with at most two places.

What it chooses where the document is silent (the emulator, docs/emulator.md, chose otherwise):

- A parameter's type is an object in the lists and the search: `"paramType": {"id": 1, "name":
  "physical"}`, `{"id": 2, "name": "calculated"}`, and a signal `{"id": 3, "name": "signal"}` (a
  physical parameter of the signal kind: listed among the physical ones, served by `/db/measure` too).
  No `type` field, no signal flag.
- `/search/params?oid=..&offset=..&limit=..` answers Spring's Page (`content`, `pageable`,
  `totalElements`, `totalPages`, `number` (offset // limit), `size`, `numberOfElements`, `first`,
  `last`, `empty`, `sort`), records ordered by id across kinds; `limit` defaults to 20 and is cut to
  2,000 silently (Spring's defaults); no `oid`: every visible object; `oid` repeated or comma-separated.
- An object's `sdirobjectstate` is `{"id": 1, "objstatename": "new"}` for a site without a controller
  (`controllersTotalCount` 0, its parameters listed, never a point), `{"id": 5, "objstatename": "in
  service"}` otherwise; `controllersOfflineCount` counts the controllers offline at the clock. The
  single-object answer adds `"workMode": {"id", "name"}` to objects whose id is a multiple of 3.
  `worstparamstate` is fixed per object (`normal`; `none` for a site without a controller).
- Measurements: the bounds `{to}` and `{from}` are both included; a start after the end is 400; raw
  windows over 24 h are 400 (averages and candles have no limit). Raw answers are `{"points": [...],
  "id": N}` (the document's field order), stamps `2026-11-10T00:01:00.000Z`; candles `{"candles":
  [...]}` with no id, stamps epoch ms. Signals answer on `/db/signal` (and `/db/measure`) with integer
  values 0 and 1; `/db/signal` ignores `count` (the cap below still holds).
- Averages and candles are a GROUP BY over the raw points inside the asked interval: one per 30-minute
  bucket (UTC) holding points, stamped at the bucket's start; a bucket cut by an edge of the interval
  aggregates only the points inside it (the emulator aggregates the whole bucket). Averages are exact
  quotients (sum of hundredths / (100 x count)).
- `count`: the first points of the interval, at most `--max-count` (5,000) whatever was asked, without
  a word; no count: the same cap; below 1 or not an integer: 400.
- Unknown or invisible ids are 404, a calculated id on a physical route and the reverse too, a
  non-signal on `/db/signal` too; a path segment that is not a 64-bit integer is 400.
- Errors under the base path are Spring Boot's JSON: `{"timestamp": ISO, "status": N, "error":
  "<reason>", "path": "<path>"}`, 401 for a call without a session (no redirect). Outside the base
  path: Tomcat's HTML 404 page.
- Sign-in: `POST /auth/login` with `username`/`password` as query parameters or a form body; the
  document's four cookies; `issToken` is an HMAC of `SEMSESSIONID` (no session is stored, none ends).
- Every answer's `Date` header tells the server's clock (`--now`), not the real time.
- Units: `{"id", "unitname", "deviceconnect": {"id", "port", "controller": {"id", "controllername"},
  "device": {"id", "devicename", "devicetype"}}}`; two external commands a device; reference lookups
  (zones, classifiers, room types, rooms) small and fixed; setvalue and command runs 403.
- Parameter status: from the last point shown at the clock (or `?time=MS`, at most the clock): none
  (id 0: nothing in the 2 h and two periods before), normal (1), warning (2), error (3), critical (4)
  by how far the value is from the parameter's middle.

Live behaviour, each a pure function of (parameter, stamp, clock), so any window asked at any time gives
the same answer and `live_client.expected` recomputes it: nothing stamped after the clock is served;
`lag` (a parameter's points show that long after their stamps); `offline` (a controller's points stamped
in [a, b) show from b on; while the clock is in [a, b) its object counts it offline); `revise` (a
calculated value is preliminary until that long after its stamp, final after); `quiet` (a parameter has
no point stamped in [a, b), b null: for good; with `backlog` true they exist and show from b on); and
sites without a controller. `--fleet FILE.json` gives them:

    {"lag": {"700012": 10800000}, "revise": {"700020": "4h"}, "offline": [[61003, START, END]],
     "quiet": [[700031, START, END_OR_NULL, BACKLOG]], "no_controller": [4007]}

times as epoch ms or ISO 8601, durations as ms or `30m`/`4h`/`2d`; the flags add seeded choices beside
them (`--quiet-share S --quiet-since D`: a share of the parameters quiet for good from D days before
`--now`). `GET /_bench/fleet` reads the whole of it back.

Control (outside the base path, no sign-in): `GET|PUT /_bench/clock` (`?ms=` or `?iso=`), `GET
/_bench/fleet`, `GET /_bench/stats` (requests, bytes of the bodies sent and p95 time in the server by
route kind: signin, objects, lists, search, raw, average, candles, signal, state, other; requests by
status), `POST /_bench/reset` (zeroes the stats), `PUT /_bench/latency?seconds=S`.
`--latency S`: each request waits S seconds first (the network). `--workers C --service-time T`: a pool
of C workers each busy T seconds a request (T without C: every request takes T, nothing waits); a
request's time in the server is from after the latency to its last byte written.
"""

from __future__ import annotations

import argparse
import contextlib
import email.utils
import hashlib
import hmac
import json
import math
import random
import re
import secrets
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import numpy as np

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
BUCKET = 30 * MINUTE
RAW_MAX = DAY
PERIODS = (60, 120, 180, 300, 600, 900)  # seconds
KINDS = ("physical", "calculated", "signal")
TYPES = {kind: {"id": i + 1, "name": kind} for i, kind in enumerate(KINDS)}  # a parameter's paramType
TAGS = {"physical": "heat", "calculated": "energy", "signal": "alarm"}
LOGINS = {"demo": ("demo", "all"), "viewer": ("viewer", "half")}
MAX_COUNT = 5000
SEARCH_SIZE, SEARCH_MAX = 20, 2000
INT64 = 2**63 - 1
# The flags that choose behaviour by seeded shares of the fleet (Fleet.build).
SHARES = [
    "quiet_share",
    "quiet_since",
    "no_controller_share",
    "lag_share",
    "lag_hours",
    "revise_share",
    "revise_hours",
]
ROUTE_KINDS = [
    "signin",
    "objects",
    "lists",
    "search",
    "raw",
    "average",
    "candles",
    "signal",
    "state",
    "other",
]


# -- times ------------------------------------------------------------------------------------------


def to_ms(value: Any) -> int:
    """Epoch ms from an integer (or its digits) or an ISO 8601 time (UTC when it names no offset)."""
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def duration_ms(value: Any) -> int:
    """A duration as ms: an integer, or `<number><ms|s|m|h|d>`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", str(value).strip())
    if not match:
        raise ValueError(f"not a duration: {value!r} (ms, or e.g. 30m, 4h, 2d)")
    unit = {"ms": 1, "s": SECOND, "m": MINUTE, "h": HOUR, "d": DAY}[match[2]]
    return round(float(match[1]) * unit)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# -- values: integers of hundredths, from a hash of (parameter, stamp) --------------------------------


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _hash(key: int, values: np.ndarray) -> np.ndarray:
    return mix(values.astype(np.int64).view(np.uint64) ^ np.uint64(key))


@dataclass(frozen=True)
class Param:
    id: int
    object_id: int
    controller_id: int | None  # None: a site without a controller
    device_id: int | None
    kind: str  # physical, calculated, signal
    period_ms: int
    base: int  # hundredths: the middle of its values
    amplitude: int  # hundredths
    shift: int  # seconds: its daily wave's phase
    key: int  # its hash key
    name: str
    unit: str

    def final(self, ts: np.ndarray) -> np.ndarray:
        """Final values at these stamps, in hundredths (int64)."""
        h = _hash(self.key, ts)
        if self.kind == "signal":
            runs = _hash(self.key, ts // (self.period_ms * 11))
            return ((runs >> np.uint64(17)) & np.uint64(1)).astype(np.int64) * 100
        noise = (h % np.uint64(self.amplitude // 5 + 1)).astype(np.int64) - self.amplitude // 10
        if self.kind == "calculated":
            steps = _hash(self.key, ts // HOUR) % np.uint64(self.amplitude + 1)
            return self.base + steps.astype(np.int64) + noise // 4
        tri = np.abs((ts // SECOND + self.shift) % 86400 - 43200)
        return self.base + self.amplitude * (43200 - 2 * tri) // 43200 + noise

    def preliminary(self, ts: np.ndarray) -> np.ndarray:
        """What a calculated value is before its revision: off by 1 to 10% of the amplitude."""
        h = _hash(self.key ^ 0x5A5A5A5A, ts)
        size = 1 + (h % np.uint64(max(self.amplitude // 10, 1))).astype(np.int64)
        sign = np.where((h >> np.uint64(40)) & np.uint64(1), 1, -1)
        return self.final(ts) + sign * size


@dataclass(frozen=True)
class Obj:
    id: int
    controllers: tuple[int, ...]  # none: a site without a controller
    devices: tuple[tuple[int, int], ...]  # (device id, its controller)
    timezone: int
    name: str


@dataclass
class Behaviour:
    """The live part: when points show, and what they are worth meanwhile (see the module docstring)."""

    lag: dict[int, int] = field(default_factory=dict)  # param -> ms
    revise: dict[int, int] = field(default_factory=dict)  # calculated param -> ms
    offline: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # controller -> [(a, b)]
    quiet: dict[int, list[tuple[int, int | None, bool]]] = field(
        default_factory=dict
    )  # param -> [(a, b, backlog)]
    no_controller: set[int] = field(default_factory=set)

    def as_json(self) -> dict[str, Any]:
        return {
            "lag": {str(k): v for k, v in sorted(self.lag.items())},
            "revise": {str(k): v for k, v in sorted(self.revise.items())},
            "offline": [[c, a, b] for c, spans in sorted(self.offline.items()) for a, b in spans],
            "quiet": [
                [p, a, b, backlog] for p, spans in sorted(self.quiet.items()) for a, b, backlog in spans
            ],
            "no_controller": sorted(self.no_controller),
        }


class FleetError(ValueError):
    """A fleet description that names what the fleet does not hold, or cannot be read."""


class Fleet:
    """Objects, controllers, devices and parameters from (objects, params, seed), and their behaviour."""

    def __init__(self, objects: int, params: int, seed: int) -> None:
        if objects < 1 or params < 1:
            raise FleetError("--objects and --params must be at least 1")
        self.size = (objects, params, seed)
        rng = random.Random(seed)
        self.objects: list[Obj] = []
        object_id, controller_id, device_id = 4000, 61000, 230000
        for i in range(objects):
            object_id += rng.choice((1, 1, 1, 2, 3))
            controllers, devices = [], []
            for _ in range(1 + (rng.random() < 0.4) + (rng.random() < 0.15)):
                controller_id += 1
                controllers.append(controller_id)
                for _ in range(rng.randint(1, 3)):
                    device_id += 1
                    devices.append((device_id, controller_id))
            zone = (3, 3, 5, 4, 7, 2, 10)[i % 7]
            self.objects.append(Obj(object_id, tuple(controllers), tuple(devices), zone, f"Site {object_id}"))
        self.params: list[Param] = []
        pid = 700000
        for i in range(params):
            obj = self.objects[i * objects // params]
            pid += rng.choice((1, 1, 1, 1, 2, 5))
            roll = rng.random()
            kind = "calculated" if roll < 0.25 else "signal" if roll > 0.93 else "physical"
            device, controller = rng.choice(obj.devices)
            period = rng.choice(PERIODS) * SECOND
            if kind == "calculated":
                base, amplitude, unit = rng.randint(0, 40000), rng.randint(200, 5000), "kWh"
            elif kind == "signal":
                base, amplitude, unit = 50, 50, ""
            else:
                base, amplitude, unit = rng.randint(-1500, 6000), rng.randint(50, 1500), "°C"
            shift = rng.randrange(86400)
            name = f"{'TCS'[KINDS.index(kind)]}-{pid}"
            self.params.append(
                Param(
                    pid,
                    obj.id,
                    controller,
                    None if kind == "calculated" else device,
                    kind,
                    period,
                    base,
                    amplitude,
                    shift,
                    0,
                    name,
                    unit,
                )
            )
        ids = np.array([p.id for p in self.params], np.uint64)
        keys = mix(ids * np.uint64(0x2545F4914F6CDD1D) + np.uint64(seed % 2**64)).tolist()
        self.params = [replace(p, key=k) for p, k in zip(self.params, keys, strict=True)]
        self.behaviour = Behaviour()
        self.clock = 0
        self._index()

    def _index(self) -> None:
        self.by_object = {o.id: o for o in self.objects}
        self.by_id = {p.id: p for p in self.params}
        self.of_object: dict[int, list[Param]] = {o.id: [] for o in self.objects}  # ascending ids
        for p in self.params:
            self.of_object[p.object_id].append(p)
        self.tags = {o: list(dict.fromkeys(TAGS[p.kind] for p in ps)) for o, ps in self.of_object.items()}
        self.device_owner = {d: o.id for o in self.objects for d, _ in o.devices}

    def strip(self, bare: set[int]) -> None:
        """These objects lose their controllers and devices: sites where none is installed, whose
        parameters are configured and never get a point."""
        unknown = bare - set(self.by_object)
        if unknown:
            raise FleetError(f"no_controller: object(s) {sorted(unknown)} not in the fleet")
        self.objects = [replace(o, controllers=(), devices=()) if o.id in bare else o for o in self.objects]
        self.params = [
            replace(p, controller_id=None, device_id=None) if p.object_id in bare else p for p in self.params
        ]
        self.behaviour.no_controller = set(bare)
        self._index()

    # -- building ---------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        objects: int,
        params: int,
        seed: int,
        now: int,
        described: Mapping[str, Any] | None = None,
        shares: Mapping[str, float] | None = None,
    ) -> Fleet:
        """The fleet of (objects, params, seed), its behaviour from a fleet file's description and the
        flags' seeded shares (`quiet_share`, `quiet_since` days, `no_controller_share`, `lag_share`,
        `lag_hours`, `revise_share`, `revise_hours`), the clock at `now`."""
        described = dict(described or {})
        shares = dict(shares or {})
        unknown = set(described) - {"lag", "revise", "offline", "quiet", "no_controller"}
        if unknown:
            raise FleetError(f"unknown key(s) {', '.join(sorted(unknown))}")
        rng = random.Random(seed ^ 0x11FE)
        fleet = cls(objects, params, seed)
        bare = set(_ids(described.get("no_controller", []), "no_controller"))
        if share := shares.get("no_controller_share"):
            bare |= {o.id for o in fleet.objects if rng.random() < share}
        fleet.strip(bare)
        fleet.clock = now
        b = fleet.behaviour
        for name, table in (("lag", b.lag), ("revise", b.revise)):
            for key, value in _items(described.get(name, {}), name):
                table[fleet._param(key, name).id] = duration_ms(value)
        for pid in b.revise:
            if fleet.by_id[pid].kind != "calculated":
                raise FleetError(f"revise: parameter {pid} is not calculated")
        for entry in _rows(described.get("offline", []), "offline", 3):
            controller, a, end = int(entry[0]), to_ms(entry[1]), to_ms(entry[2])
            if not any(controller in o.controllers for o in fleet.objects):
                raise FleetError(f"offline: controller {controller} not in the fleet")
            b.offline.setdefault(controller, []).append(_span(a, end, "offline"))
        for entry in _rows(described.get("quiet", []), "quiet", 3, 4):
            pid = fleet._param(entry[0], "quiet").id
            a, end = to_ms(entry[1]), None if entry[2] is None else to_ms(entry[2])
            if end is not None:
                _span(a, end, "quiet")
            b.quiet.setdefault(pid, []).append((a, end, bool(entry[3]) if len(entry) > 3 else False))
        live = [p for p in fleet.params if p.controller_id is not None]
        if share := shares.get("quiet_share"):
            since = now - round(shares.get("quiet_since", 7) * DAY)
            for p in live:
                if rng.random() < share and p.id not in b.quiet:
                    b.quiet[p.id] = [(since, None, False)]
        if share := shares.get("lag_share"):
            for p in live:
                if rng.random() < share:
                    b.lag.setdefault(p.id, round(shares.get("lag_hours", 3) * HOUR))
        if share := shares.get("revise_share"):
            for p in live:
                if p.kind == "calculated" and rng.random() < share:
                    b.revise.setdefault(p.id, round(shares.get("revise_hours", 4) * HOUR))
        return fleet

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Fleet:
        """The fleet `GET /_bench/fleet` describes, at its clock."""
        objects, params, seed = doc["size"]
        return cls.build(objects, params, seed, doc["now"], doc["behaviour"])

    def as_json(self) -> dict[str, Any]:
        return {
            "size": list(self.size),
            "now": self.clock,
            "behaviour": self.behaviour.as_json(),
            "objects": [
                {"id": o.id, "controllers": list(o.controllers), "devices": [d for d, _ in o.devices]}
                for o in self.objects
            ],
            "parameters": [
                {
                    "id": p.id,
                    "object_id": p.object_id,
                    "controller_id": p.controller_id,
                    "kind": p.kind,
                    "period_s": p.period_ms // SECOND,
                }
                for p in self.params
            ],
        }

    def _param(self, key: Any, what: str) -> Param:
        try:
            return self.by_id[int(key)]
        except (KeyError, ValueError, TypeError):
            raise FleetError(f"{what}: parameter {key!r} not in the fleet") from None

    # -- what shows at a clock ----------------------------------------------------------------------

    def stamps(self, p: Param, lo: int, hi: int, clock: int) -> np.ndarray:
        """The stamps of p's points in [lo, hi] (both included) shown at `clock`, ascending."""
        b = self.behaviour
        hi = min(hi, clock - b.lag.get(p.id, 0))
        if p.controller_id is None or hi < lo:
            return np.empty(0, np.int64)
        first = -(-lo // p.period_ms) * p.period_ms
        ts = np.arange(first, hi + 1, p.period_ms, dtype=np.int64)
        hidden = [(a, end) for a, end in b.offline.get(p.controller_id, ()) if clock < end]
        for a, end, backlog in b.quiet.get(p.id, ()):
            if not backlog or end is None or clock < end:
                hidden.append((a, INT64 if end is None else end))
        for a, end in hidden:
            i, j = np.searchsorted(ts, [a, end])
            if j > i:
                ts = np.concatenate([ts[:i], ts[j:]])
        return ts

    def values(self, p: Param, ts: np.ndarray, clock: int) -> np.ndarray:
        """Values at these stamps as shown at `clock`, in hundredths."""
        delay = self.behaviour.revise.get(p.id)
        if not delay or not len(ts):
            return p.final(ts)
        return np.where(ts > clock - delay, p.preliminary(ts), p.final(ts))

    def raw(
        self, p: Param, lo: int, hi: int, clock: int, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        ts = self.stamps(p, lo, hi, clock)[:limit]
        return ts, self.values(p, ts, clock)

    def buckets(
        self, p: Param, lo: int, hi: int, clock: int, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The points of the first `limit` 30-minute buckets holding points of [lo, hi] (cut by its
        edges): their stamps, the index of each bucket's first point, their values. Only the days those
        buckets need are generated."""
        chunks_ts: list[np.ndarray] = []
        found = 0
        step = max(DAY, (limit or 0) * BUCKET)
        at = lo
        while at <= hi and (limit is None or found < limit):
            end = min(hi, at + step - 1)
            ts = self.stamps(p, at, end, clock)
            if len(ts):
                chunks_ts.append(ts)
                found += len(np.unique(ts // BUCKET))
            at = end + 1
            step *= 2
        ts = np.concatenate(chunks_ts) if chunks_ts else np.empty(0, np.int64)
        bucket = ts // BUCKET * BUCKET
        first = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]]) if len(ts) else np.empty(0, np.int64)
        if limit is not None and len(first) > limit:
            ts = ts[: first[limit]]
            first = first[:limit]
        return ts, first, self.values(p, ts, clock)

    def average(
        self, p: Param, lo: int, hi: int, clock: int, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        ts, first, v = self.buckets(p, lo, hi, clock, limit)
        if not len(first):
            return ts, np.empty(0)
        sums = np.add.reduceat(v, first)
        counts = np.diff(np.r_[first, len(v)])
        return ts[first] // BUCKET * BUCKET, sums / (100 * counts)

    def candles(
        self, p: Param, lo: int, hi: int, clock: int, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(stamps, open, high, low, close)."""
        ts, first, v = self.buckets(p, lo, hi, clock, limit)
        if not len(first):
            empty = np.empty(0)
            return ts, empty, empty, empty, empty
        last = np.r_[first[1:], len(v)] - 1
        return (
            ts[first] // BUCKET * BUCKET,
            v[first] / 100,
            np.maximum.reduceat(v, first) / 100,
            np.minimum.reduceat(v, first) / 100,
            v[last] / 100,
        )

    def offline_count(self, obj: Obj, clock: int) -> int:
        return sum(
            1
            for c in obj.controllers
            if any(a <= clock < end for a, end in self.behaviour.offline.get(c, ()))
        )


def _items(value: Any, what: str) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return value.items()
    if isinstance(value, list) and all(isinstance(v, list) and len(v) == 2 for v in value):
        return [(k, v) for k, v in value]
    raise FleetError(f"{what}: expected {{param: duration}} or [[param, duration], ...]")


def _rows(value: Any, what: str, least: int, most: int | None = None) -> list[list[Any]]:
    most = most or least
    if not isinstance(value, list) or not all(isinstance(v, list) and least <= len(v) <= most for v in value):
        raise FleetError(
            f"{what}: expected a list of [{least if least == most else f'{least}-{most}'} items]"
        )
    return value


def _ids(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise FleetError(f"{what}: expected a list of ids")
    try:
        return [int(v) for v in value]
    except (ValueError, TypeError):
        raise FleetError(f"{what}: expected a list of ids") from None


def _span(a: int, b: int, what: str) -> tuple[int, int]:
    if b < a:
        raise FleetError(f"{what}: a span ends ({iso(b)}) before it starts ({iso(a)})")
    return a, b


# -- the server ---------------------------------------------------------------------------------------


class Failure(Exception):
    """An answer with this status (and headers), its body Spring's error JSON."""

    def __init__(self, status: int, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(status)
        self.status, self.headers = status, headers


class Histogram:
    """Times in ms in log-spaced bins (2% apart): a p95 within 2% in bounded memory."""

    LOW, STEP, BINS = 0.01, math.log(1.02), 1200

    def __init__(self) -> None:
        self.bins = [0] * self.BINS
        self.n = 0
        self.total = 0.0

    def add(self, ms: float) -> None:
        i = 0 if ms <= self.LOW else min(self.BINS - 1, int(math.log(ms / self.LOW) / self.STEP) + 1)
        self.bins[i] += 1
        self.n += 1
        self.total += ms

    def quantile(self, q: float) -> float | None:
        if not self.n:
            return None
        rank, seen = q * self.n, 0
        for i, count in enumerate(self.bins):
            seen += count
            if seen >= rank:
                return round(self.LOW * math.exp(i * self.STEP), 3)
        return None


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = dict.fromkeys(ROUTE_KINDS, 0)
        self.bytes = dict.fromkeys(ROUTE_KINDS, 0)
        self.status: dict[str, int] = {}
        self.times = {k: Histogram() for k in ROUTE_KINDS}
        self.all = Histogram()

    def add(self, kind: str, status: int, size: int, ms: float) -> None:
        with self.lock:
            self.requests[kind] += 1
            self.bytes[kind] += size
            self.status[str(status)] = self.status.get(str(status), 0) + 1
            self.times[kind].add(ms)
            self.all.add(ms)

    def as_json(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": sum(self.requests.values()),
                "bytes": sum(self.bytes.values()),
                "by_kind": {
                    k: {
                        "requests": self.requests[k],
                        "bytes": self.bytes[k],
                        "server_ms_p95": self.times[k].quantile(0.95),
                    }
                    for k in ROUTE_KINDS
                },
                "by_status": dict(sorted(self.status.items())),
                "timed": self.all.n,
                "server_ms_p95": self.all.quantile(0.95),
                "server_ms_mean": round(self.all.total / self.all.n, 3) if self.all.n else None,
            }


class Live:
    """What every handler thread shares."""

    def __init__(self, fleet: Fleet, base_path: str, max_count: int) -> None:
        self.fleet, self.base_path, self.max_count = fleet, base_path.rstrip("/"), max_count
        self.secret = secrets.token_bytes(32)
        self.stats = Stats()
        self.latency = 0.0
        self.service_time = 0.0
        self.workers: threading.Semaphore | None = None
        half = {o.id for o in fleet.objects[: max(1, len(fleet.objects) // 2)]}
        self.visible = {"all": set(fleet.by_object), "half": half}

    def token(self, session: str) -> str:
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()[:40]


Answer = tuple[int, bytes, tuple[tuple[str, str], ...]]
ID = r"([^/]+)"
ROUTES: list[tuple[re.Pattern[str], str, str, str]] = [
    (re.compile(p), method, name, kind)
    for p, method, name, kind in (
        (r"/auth/login", "POST", "login", "signin"),
        (r"/db/object/shortest", "GET", "objects_short", "objects"),
        (r"/db/object", "GET", "objects", "objects"),
        (rf"/db/object/{ID}", "GET", "object", "objects"),
        (rf"/db/object/{ID}/unit", "GET", "units", "objects"),
        (rf"/db/object/{ID}/(cdp|ccp|params)", "GET", "object_params", "lists"),
        (r"/db/(contrdeviceparam|contrcalcparam)(/shortest)?", "GET", "param_list", "lists"),
        (r"/search/params", "GET", "search", "search"),
        (rf"/db/(measure|calcvalue)/(average|candles)/{ID}/{ID}/{ID}", "GET", "aggregate", ""),
        (rf"/db/measure/{ID}/(average|candles)/{ID}/{ID}", "GET", "aggregate_alt", ""),
        (rf"/db/(measure|calcvalue|signal)/{ID}/{ID}/{ID}", "GET", "raw", ""),
        (rf"/db/contrdeviceparam/{ID}/state", "GET", "state", "state"),
        (rf"/db/contrdeviceparam/{ID}/setvalue", "POST", "forbidden", "other"),
        (r"/extcommand", "GET", "commands", "other"),
        (rf"/db/unit/{ID}/command", "POST", "forbidden", "other"),
        (r"/db/zone", "POST", "zones", "other"),
        (r"/deviceclassifier", "POST", "classifiers", "other"),
        (r"/sensor_location", "POST", "room_types", "other"),
        (r"/room", "POST", "rooms", "other"),
    )
]
STATES = ("none", "normal", "warning", "error", "critical")


def _int(text: str) -> int:
    """A path segment or query value as Java's Long reads it; 400 otherwise."""
    if not re.fullmatch(r"-?\d{1,19}", text) or not -INT64 - 1 <= int(text) <= INT64:
        raise Failure(400)
    return int(text)


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # TCP_NODELAY: a body written after its headers must not wait for an ACK
    server_version = "live"
    sys_version = ""
    live: Live

    def log_message(self, *args: object) -> None:  # quiet: a line a request would cost more than the answer
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header tells the platform's clock, as an origin server's does."""
        return email.utils.formatdate(self.live.fleet.clock / 1000, usegmt=True)

    def handle(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client gone
            super().handle()

    def _send(
        self, status: int, body: bytes, headers: Iterable[tuple[str, str]] = (), kind: str = "json"
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html;charset=utf-8" if kind == "html" else "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        live = self.live
        if path.startswith("/_bench/"):
            return self._control(path, parse_qs(query))
        if live.latency:
            time.sleep(live.latency)
        arrived = time.perf_counter()
        if live.workers is None:
            status, kind, size = self._platform(path, query, body)
        else:
            with live.workers:
                status, kind, size = self._platform(path, query, body)
        live.stats.add(kind, status, size, (time.perf_counter() - arrived) * 1000)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def _platform(self, path: str, query: str, body: bytes) -> tuple[int, str, int]:
        """Answers a request of the platform: (status, route kind, body bytes)."""
        live = self.live
        if live.service_time:
            time.sleep(live.service_time)
        kind = "other"
        if not (path == live.base_path or path.startswith(live.base_path + "/")):
            page = tomcat_404(path)
            self._send(404, page, kind="html")
            return 404, kind, len(page)
        route = path[len(live.base_path) :] or "/"
        try:
            for pattern, method, name, route_kind in ROUTES:
                match = pattern.fullmatch(route)
                if match is None:
                    continue
                kind = route_kind or self._series_kind(name, match)
                if self.command != method:
                    raise Failure(405, (("Allow", method),))
                args = parse_qs(query, keep_blank_values=True)
                if name == "login":
                    status, answer, headers = self.login(args, body)
                else:
                    login = self._session()
                    status, answer, headers = getattr(self, "on_" + name)(login, args, *match.groups())
                break
            else:
                raise Failure(404)
        except Failure as failure:
            status, answer, headers = failure.status, self._error(failure.status, path), failure.headers
        except Exception:  # noqa: BLE001 - a bug here is a 500, and said on stderr
            traceback.print_exc()
            status, answer, headers = 500, self._error(500, path), ()
        self._send(status, answer, headers)
        return status, kind, len(answer)

    @staticmethod
    def _series_kind(name: str, match: re.Match[str]) -> str:
        if name in ("aggregate", "aggregate_alt"):
            return match[2]
        return "signal" if match[1] == "signal" else "raw"

    def _error(self, status: int, path: str) -> bytes:
        stamp = datetime.fromtimestamp(self.live.fleet.clock / 1000, UTC).isoformat(timespec="milliseconds")
        return _json({"timestamp": stamp, "status": status, "error": HTTPStatus(status).phrase, "path": path})

    # -- sign-in and sessions -------------------------------------------------------------------------

    def login(self, args: dict[str, list[str]], body: bytes) -> Answer:
        fields = dict(args)
        if body and "form-urlencoded" in (self.headers.get("Content-Type") or ""):
            fields.update(parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True))
        username = (fields.get("username") or [""])[0]
        password = (fields.get("password") or [""])[0]
        known = LOGINS.get(username)
        if known is None or not hmac.compare_digest(known[0].encode(), password.encode()):
            raise Failure(401)
        live = self.live
        session = f"{secrets.token_hex(16)}.{username}"
        base = live.base_path or "/"
        cookies = (
            f"SEMSESSIONID={session}; Path=/; HttpOnly; SameSite=lax",
            f"rememberMe=deleteMe; Path={base}; Max-Age=0; SameSite=lax",
            f"language=en; Path={base}",
            f"issToken={live.token(session)}; Path=/",
        )
        user = {
            "id": 17 if username == "demo" else 18,
            "login": username,
            "firstname": username.title(),
            "lastname": "Benchmark",
            "middlename": "",
            "state": {"id": 1, "name": "active", "comment": ""},
            "theme": 2,
            "ilocale": "en-GB",
            "defaultScreen": 3,
            "soundOn": False,
            "comment": None,
            "authService": "LOCAL",
            "privileges": [{"id": 1, "name": "READ"}],
        }
        headers = (*(("Set-Cookie", c) for c in cookies), ("Access-Control-Allow-Credentials", "true"))
        return 200, _json(user), headers

    def _session(self) -> str:
        """The login of the request's session; 401 without one."""
        cookies: dict[str, str] = {}
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            cookies[name] = value
        session, token = cookies.get("SEMSESSIONID", ""), cookies.get("issToken", "")
        login = session.rpartition(".")[2]
        if not token or login not in LOGINS or not hmac.compare_digest(token, self.live.token(session)):
            raise Failure(401)
        return login

    def _visible(self, login: str) -> set[int]:
        return self.live.visible[LOGINS[login][1]]

    def _object(self, login: str, text: str) -> Obj:
        oid = _int(text)
        if oid not in self._visible(login):
            raise Failure(404)
        return self.live.fleet.by_object[oid]

    def _param(self, login: str, text: str) -> Param:
        p = self.live.fleet.by_id.get(_int(text))
        if p is None or p.object_id not in self._visible(login):
            raise Failure(404)
        return p

    # -- objects ------------------------------------------------------------------------------------

    def _object_record(self, o: Obj, clock: int) -> dict[str, Any]:
        fleet = self.live.fleet
        bare = not o.controllers
        return {
            "id": o.id,
            "shortname": o.name,
            "fullname": f"{o.name}, building {o.id % 7 + 1}",
            "comment": "",
            "zipcode": f"{100000 + o.id * 37 % 899999}",
            "timezone": o.timezone,
            "area": round(120.5 + o.id % 900 * 3.25, 2),
            "latitude": round(55.0 + (o.id % 97) / 100, 5),
            "longitude": round(37.0 + (o.id % 89) / 100, 5),
            "employees": o.id % 40,
            "objrubric": {"id": 2 + o.id % 3, "shortname": ("school", "office", "clinic")[o.id % 3]},
            "sdirobjectstate": {"id": 1, "objstatename": "new", "comment": "no controller installed"}
            if bare
            else {"id": 5, "objstatename": "in service", "comment": ""},
            "worstparamstate": {"id": 0, "statename": "no data", "statecolor": "none", "comment": ""}
            if bare
            else {"id": 1, "statename": "normal", "statecolor": "normal", "comment": ""},
            "worstparamcount": 0,
            "paramtags": fleet.tags.get(o.id, []),
            "calendar": {"id": 1, "name": "default", "description": "working days"},
            "address": f"{o.id % 150 + 1} Main Street",
            "controllersTotalCount": len(o.controllers),
            "controllersOfflineCount": fleet.offline_count(o, clock),
            "attrs": {"region": f"R{o.id % 5}"},
        }

    def on_objects_short(self, login: str, args: dict[str, list[str]]) -> Answer:
        objects = [o for o in self.live.fleet.objects if o.id in self._visible(login)]
        return 200, _json([{"id": o.id, "shortname": o.name} for o in objects]), ()

    def on_objects(self, login: str, args: dict[str, list[str]]) -> Answer:
        states = {_int(s) for s in _list(args, "state")}
        clock = self.live.fleet.clock
        records = [
            self._object_record(o, clock) for o in self.live.fleet.objects if o.id in self._visible(login)
        ]
        if states:
            records = [r for r in records if r["sdirobjectstate"]["id"] in states]
        return 200, _json(records), ()

    def on_object(self, login: str, args: dict[str, list[str]], oid: str) -> Answer:
        o = self._object(login, oid)
        record = self._object_record(o, self.live.fleet.clock)
        if o.id % 3 == 0:
            record["workMode"] = {"id": 1 + o.id % 2, "name": ("heating", "summer")[o.id % 2]}
        return 200, _json(record), ()

    def on_units(self, login: str, args: dict[str, list[str]], oid: str) -> Answer:
        o = self._object(login, oid)
        units = [
            {
                "id": device * 10 + 1,
                "unitname": f"Unit {device}",
                "deviceconnect": {
                    "id": device * 10 + 2,
                    "port": i % 4 + 1,
                    "controller": {"id": controller, "controllername": f"CTL-{controller}"},
                    "device": {"id": device, "devicename": f"Meter {device}", "devicetype": "MODBUS"},
                },
            }
            for i, (device, controller) in enumerate(o.devices)
        ]
        return 200, _json(units), ()

    # -- parameters ---------------------------------------------------------------------------------

    @staticmethod
    def _param_record(p: Param, short: bool = False) -> dict[str, Any]:
        if short:
            return {"id": p.id, "name": p.name, "objectId": p.object_id}
        record: dict[str, Any] = {
            "id": p.id,
            "name": p.name,
            "paramType": TYPES[p.kind],
            "objectId": p.object_id,
            "controllerId": p.controller_id,
            "measureUnit": {"id": 1 + len(p.unit), "name": p.unit},
            "pollPeriod": p.period_ms // SECOND,
            "tags": [TAGS[p.kind]],
        }
        if p.kind == "calculated":
            record["expression"] = f"avg(P{p.id - 1})"
        else:
            record.update(deviceId=p.device_id, ctrability=p.kind == "signal", locked=False)
        return record

    def _params_of(self, login: str, objects: set[int] | None, kinds: tuple[str, ...]) -> list[Param]:
        """The parameters of these kinds of the visible objects among `objects` (None: all), by id."""
        fleet, visible = self.live.fleet, self._visible(login)
        chosen = visible if objects is None else objects & visible
        found = [p for o in sorted(chosen) for p in fleet.of_object[o] if p.kind in kinds]
        return found if len(chosen) < 2 else sorted(found, key=lambda p: p.id)

    def on_param_list(self, login: str, args: dict[str, list[str]], which: str, short: str | None) -> Answer:
        kinds = ("calculated",) if which == "contrcalcparam" else ("physical", "signal")
        objects = {_int(v) for v in _list(args, "objectId")} or None
        controllers = {_int(v) for v in _list(args, "controllerId")}
        found = [
            p
            for p in self._params_of(login, objects, kinds)
            if not controllers or p.controller_id in controllers
        ]
        return 200, _json([self._param_record(p, bool(short)) for p in found]), ()

    def on_object_params(self, login: str, args: dict[str, list[str]], oid: str, which: str) -> Answer:
        o = self._object(login, oid)
        if which == "cdp":
            kinds: tuple[str, ...] = ("physical", "signal")
        elif which == "ccp":
            kinds = ("calculated",)
        else:
            calc = (_list(args, "calc") or ["false"])[0].lower() == "true"
            kinds = ("physical", "signal", "calculated") if calc else ("physical", "signal")
        found = self._params_of(login, {o.id}, kinds)
        return 200, _json([self._param_record(p) for p in found]), ()

    def on_search(self, login: str, args: dict[str, list[str]]) -> Answer:
        objects = {_int(v) for v in _list(args, "oid")} or None
        limit = _int((args.get("limit") or [str(SEARCH_SIZE)])[0] or str(SEARCH_SIZE))
        offset = _int((args.get("offset") or ["0"])[0] or "0")
        if limit < 1 or offset < 0:
            raise Failure(400)
        limit = min(limit, SEARCH_MAX)
        found = self._params_of(login, objects, KINDS)
        page = found[offset : offset + limit]
        total = len(found)
        pages = -(-total // limit)
        sort = {"empty": True, "sorted": False, "unsorted": True}
        doc = {
            "content": [self._param_record(p) for p in page],
            "pageable": {
                "sort": sort,
                "offset": offset,
                "pageNumber": offset // limit,
                "pageSize": limit,
                "paged": True,
                "unpaged": False,
            },
            "last": offset + limit >= total,
            "totalElements": total,
            "totalPages": pages,
            "size": limit,
            "number": offset // limit,
            "sort": sort,
            "first": offset == 0,
            "numberOfElements": len(page),
            "empty": not page,
        }
        return 200, _json(doc), ()

    # -- measurements -------------------------------------------------------------------------------

    def _window(self, args: dict[str, list[str]], start: str, end: str, raw: bool) -> tuple[int, int, int]:
        lo, hi = _int(start), _int(end)
        if lo > hi or (raw and hi - lo > RAW_MAX):
            raise Failure(400)
        count = self.live.max_count
        given = (args.get("count") or [""])[0]
        if given:
            asked = _int(given)
            if asked < 1:
                raise Failure(400)
            count = min(asked, count)
        return lo, hi, count

    def _series_param(self, login: str, text: str, route: str) -> Param:
        p = self._param(login, text)
        if route == "calcvalue" and p.kind != "calculated":
            raise Failure(404)
        if route == "measure" and p.kind == "calculated":
            raise Failure(404)
        if route == "signal" and p.kind != "signal":
            raise Failure(404)
        return p

    def on_raw(
        self, login: str, args: dict[str, list[str]], route: str, pid: str, start: str, end: str
    ) -> Answer:
        p = self._series_param(login, pid, route)
        if route == "signal":
            args = {k: v for k, v in args.items() if k != "count"}
        lo, hi, count = self._window(args, start, end, raw=True)
        fleet = self.live.fleet
        ts, v = fleet.raw(p, lo, hi, fleet.clock, count)
        values = (v // 100).tolist() if p.kind == "signal" else (v / 100).tolist()  # signals as integers
        return 200, points_body(p.id, ts, values), ()

    def on_aggregate(
        self, login: str, args: dict[str, list[str]], route: str, series: str, pid: str, start: str, end: str
    ) -> Answer:
        p = self._series_param(login, pid, route)
        lo, hi, count = self._window(args, start, end, raw=False)
        fleet = self.live.fleet
        if series == "average":
            ts, mean = fleet.average(p, lo, hi, fleet.clock, count)
            return 200, points_body(p.id, ts, mean.tolist()), ()
        return 200, candles_body(*fleet.candles(p, lo, hi, fleet.clock, count)), ()

    def on_aggregate_alt(
        self, login: str, args: dict[str, list[str]], pid: str, series: str, start: str, end: str
    ) -> Answer:
        return self.on_aggregate(login, args, "measure", series, pid, start, end)

    def on_state(self, login: str, args: dict[str, list[str]], pid: str) -> Answer:
        p = self._series_param(login, pid, "measure")
        fleet = self.live.fleet
        at = fleet.clock
        if given := (args.get("time") or [""])[0]:
            at = min(_int(given), at)
        ts, v = fleet.raw(p, at - 2 * HOUR - 2 * p.period_ms, at, at)
        level = 0
        if len(ts):
            off = abs(int(v[-1]) - p.base) / max(p.amplitude, 1)
            level = 1 if off <= 0.6 else 2 if off <= 0.85 else 3 if off <= 0.95 else 4
        name = STATES[level]
        return 200, _json({"id": level, "statename": name, "statecolor": name, "comment": ""}), ()

    # -- the rest -----------------------------------------------------------------------------------

    def on_forbidden(self, login: str, args: dict[str, list[str]], *ids: str) -> Answer:
        raise Failure(403)

    def on_commands(self, login: str, args: dict[str, list[str]]) -> Answer:
        device = _int((args.get("deviceId") or [""])[0] or "x")
        owner = self.live.fleet.device_owner.get(device)
        if owner is None or owner not in self._visible(login):
            return 200, b"[]", ()
        record = {"id": device, "devicename": f"Meter {device}", "devicetype": "MODBUS", "comment": ""}
        commands = [
            {
                "id": device * 10 + i,
                "name": name,
                "description": f"{name} on the meter",
                "cmd": f"{i:02x}",
                "data": "",
                "fport": 2,
                "device": record,
            }
            for i, name in ((1, "reset"), (2, "resync"))
        ]
        return 200, _json(commands), ()

    def on_zones(self, login: str, args: dict[str, list[str]]) -> Answer:
        return 200, _json([{"id": i, "zonename": n} for i, n in ((1, "North"), (2, "South"))]), ()

    def on_classifiers(self, login: str, args: dict[str, list[str]]) -> Answer:
        return 200, _json([{"id": 1, "name": "meter", "description": "metering", "sys": True}]), ()

    def on_room_types(self, login: str, args: dict[str, list[str]]) -> Answer:
        return 200, _json([{"id": 1, "locationname": "boiler room"}, {"id": 2, "locationname": "office"}]), ()

    def on_rooms(self, login: str, args: dict[str, list[str]]) -> Answer:
        wanted = {_int(v) for v in _list(args, "objectId")}
        rooms = [
            {"id": o.id * 10 + 1, "roomname": f"Boiler room {o.id}", "objectId": o.id, "sensorLocationId": 1}
            for o in self.live.fleet.objects
            if o.id in self._visible(login) and (not wanted or o.id in wanted)
        ]
        return 200, _json(rooms), ()

    # -- control --------------------------------------------------------------------------------------

    def _control(self, path: str, args: dict[str, list[str]]) -> None:
        live = self.live
        try:
            if path == "/_bench/clock":
                if self.command == "PUT":
                    if "iso" in args:
                        live.fleet.clock = to_ms(args["iso"][0])
                    else:
                        live.fleet.clock = to_ms(args["ms"][0])
                doc: Any = {"now": live.fleet.clock, "iso": iso(live.fleet.clock)}
            elif path == "/_bench/fleet":
                doc = live.fleet.as_json()
            elif path == "/_bench/stats":
                doc = live.stats.as_json()
            elif path == "/_bench/reset" and self.command == "POST":
                live.stats.reset()
                doc = live.stats.as_json()
            elif path == "/_bench/latency" and self.command == "PUT":
                live.latency = float(args["seconds"][0])
                doc = {"latency": live.latency}
            else:
                return self._send(404, _json({"error": f"no control {self.command} {path}"}))
        except (KeyError, ValueError) as exc:
            return self._send(400, _json({"error": f"{self.command} {path}: {exc}"}))
        self._send(200, _json(doc))


def _list(args: dict[str, list[str]], name: str) -> list[str]:
    """A list parameter as Spring binds one: repeated, or comma-separated."""
    return [v for value in args.get(name, ()) for v in value.split(",") if v.strip()]


def _stamps(ts: np.ndarray) -> list[str]:
    return np.datetime_as_string(ts.astype("datetime64[ms]"), unit="ms").tolist()


def points_body(pid: int, ts: np.ndarray, values: list[Any]) -> bytes:
    points = ",".join(
        f'{{"timestmp":"{s}Z","value":{v!r}}}' for s, v in zip(_stamps(ts), values, strict=True)
    )
    return f'{{"points":[{points}],"id":{pid}}}'.encode()


def candles_body(ts: np.ndarray, o: np.ndarray, h: np.ndarray, lo: np.ndarray, c: np.ndarray) -> bytes:
    rows = zip(ts.tolist(), o.tolist(), c.tolist(), lo.tolist(), h.tolist(), strict=True)
    candles = ",".join(
        f'{{"timestmp":{t},"open":{a!r},"close":{z!r},"low":{m!r},"high":{x!r}}}' for t, a, z, m, x in rows
    )
    return f'{{"candles":[{candles}]}}'.encode()


def tomcat_404(path: str) -> bytes:
    text = path.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        '<!doctype html><html lang="en"><head><title>HTTP Status 404 – Not Found</title></head><body>'
        f'<h1>HTTP Status 404 – Not Found</h1><hr class="line" /><p><b>Type</b> Status Report</p>'
        f"<p><b>Message</b> {text}</p><p><b>Description</b> The origin server did not find a current "
        "representation for the target resource or is not willing to disclose that one exists.</p>"
        "</body></html>"
    ).encode()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base-path", default="/sem-restservices")
    parser.add_argument("--objects", type=int, default=8)
    parser.add_argument("--params", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--now", required=True, help="the clock: epoch ms or ISO 8601")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each request waits first")
    parser.add_argument("--workers", type=int, help="at most this many requests served at once")
    parser.add_argument("--service-time", type=float, default=0.0, help="seconds a worker spends a request")
    parser.add_argument("--max-count", type=int, default=MAX_COUNT, help="points an answer holds at most")
    parser.add_argument("--fleet", help="a JSON file: lag, revise, offline, quiet, no_controller")
    parser.add_argument("--quiet-share", type=float, help="share of parameters quiet for good")
    parser.add_argument("--quiet-since", type=float, default=7.0, help="days before --now they went quiet")
    parser.add_argument("--no-controller-share", type=float, help="share of objects without a controller")
    parser.add_argument("--lag-share", type=float, help="share of parameters whose points come late")
    parser.add_argument("--lag-hours", type=float, default=3.0)
    parser.add_argument("--revise-share", type=float, help="share of calculated parameters revised")
    parser.add_argument("--revise-hours", type=float, default=4.0)
    args = parser.parse_args(argv)
    shares = {k: v for k, v in vars(args).items() if k in SHARES and v is not None}
    try:
        now = to_ms(args.now)
    except ValueError:
        parser.error(f"--now {args.now!r}: expected epoch ms or an ISO 8601 time")
    try:
        described: Any = {}
        if args.fleet:
            with open(args.fleet, encoding="utf-8") as file:
                described = json.load(file)
        if not isinstance(described, dict):
            raise FleetError("expected a JSON object")
        fleet = Fleet.build(args.objects, args.params, args.seed, now, described, shares)
    except (OSError, ValueError) as exc:
        parser.exit(2, f"live.py: {'--fleet ' + args.fleet + ': ' if args.fleet else ''}{exc}\n")
    live = Live(fleet, args.base_path, args.max_count)
    live.latency = args.latency
    live.service_time = args.service_time
    if args.workers:
        live.workers = threading.Semaphore(args.workers)
    Handler.live = live
    ThreadingHTTPServer.request_queue_size = 1024  # a client opening its connections at once
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("ready", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
