"""The emulator's dataset: records and series as pure, vectorised functions of the seed.

Series values depend only on (seed, parameter id, time), so any window, fetched in any order,
from any emulator with the same settings, gives the same points. Tests import these functions to
recompute exactly what the server answers:

    ds = Dataset(seed=7, objects=2, params_per_object=3, calc_per_object=1)
    ts, values = raw_series(ds, 1001, start_ms, end_ms)

Sampling of one parameter with period P (whole seconds, drawn from `period_range`):
point k is at k*P + jitter_k ms, jitter_k in [0, P/2) hashed from (seed, param, k), so times are
irregular, strictly increasing and computable for any window without history. Each UTC day has
one gap of 15 to 90 minutes at a hashed time. Analog and calculated values are a daily cycle in
the object's local time (by whole second) plus hashed noise, rounded to 3 decimals; signal values
are 0.0/1.0, constant over blocks of 5 to 60 minutes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

SECOND_MS = 1000
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
BUCKET_MS = 30 * 60_000
TIMEZONES = (3, 0, -5, 5, 9, -8, 1)
DEVICES_PER_OBJECT = 2
CALC_OFFSET = 500

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
# Salts keep the hash streams of one parameter independent.
_SAMPLE, _GAP_AT, _GAP_LEN, _BLOCK = 1, 2, 3, 4


def _mix_int(x: int) -> int:
    """splitmix64 finaliser on a Python int (for per-parameter constants)."""
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _key(*parts: int) -> int:
    h = 0
    for part in parts:
        h = _mix_int(h ^ (part & _M64))
    return h


def _hash(key: int, k: np.ndarray) -> np.ndarray:
    """splitmix64 of stream `key` at positions `k` (int64 array) -> uint64 array (in-place ops: speed)."""
    x = k.astype(np.uint64)
    x *= np.uint64(_GOLDEN)
    x += np.uint64(key)
    t = x >> np.uint64(30)
    x ^= t
    x *= np.uint64(0xBF58476D1CE4E5B9)
    np.right_shift(x, np.uint64(27), out=t)
    x ^= t
    x *= np.uint64(0x94D049BB133111EB)
    np.right_shift(x, np.uint64(31), out=t)
    x ^= t
    return x


def _unit_int(key: int) -> float:
    return (key >> 11) / (1 << 53)


@dataclass(frozen=True)
class Param:
    """Everything the generator needs about one parameter."""

    id: int
    kind: str  # "analog" | "signal" | "calculated"
    object_id: int
    j: int
    device_id: int
    controller_id: int
    tz: int
    period_ms: int
    key: int
    sample_key: int
    block_key: int
    base: float
    amp: float
    noise: float
    block_ms: int

    @property
    def physical(self) -> bool:
        return self.kind != "calculated"


@dataclass(frozen=True)
class Dataset:
    """The shape of the emulated platform; hashable, so per-parameter specs are cached."""

    seed: int = 42
    objects: int = 3
    params_per_object: int = 4
    calc_per_object: int = 2
    period_range: tuple[int, int] = (10, 900)

    def __post_init__(self) -> None:
        lo, hi = self.period_range
        if not 1 <= lo <= hi:
            raise ValueError(f"period_range must be 1 <= MIN <= MAX seconds, got {lo}:{hi}")
        if not (0 <= self.params_per_object < CALC_OFFSET and 0 <= self.calc_per_object < 1000 - CALC_OFFSET):
            raise ValueError(f"at most {CALC_OFFSET - 1} physical and {999 - CALC_OFFSET} calculated parameters per object")
        object.__setattr__(self, "period_range", (int(lo), int(hi)))

    @property
    def object_ids(self) -> range:
        return range(1, self.objects + 1)

    def physical_ids(self, object_id: int) -> list[int]:
        return [object_id * 1000 + j for j in range(1, self.params_per_object + 1)]

    def calc_ids(self, object_id: int) -> list[int]:
        return [object_id * 1000 + CALC_OFFSET + j for j in range(1, self.calc_per_object + 1)]

    def param(self, param_id: int) -> Param | None:
        """The parameter with this id, or None when there is none."""
        return _param(self, int(param_id))


def as_dataset(source: Any) -> Dataset:
    """A Dataset from a Dataset, a seed (default shape), or anything with the same attributes
    (e.g. an EmulatorConfig)."""
    if isinstance(source, Dataset):
        return source
    if isinstance(source, int):
        return Dataset(seed=source)
    return Dataset(
        seed=source.seed, objects=source.objects, params_per_object=source.params_per_object,
        calc_per_object=source.calc_per_object, period_range=tuple(source.period_range),
    )


@functools.lru_cache(maxsize=65536)
def _param(ds: Dataset, pid: int) -> Param | None:
    object_id, rest = divmod(pid, 1000)
    if not 1 <= object_id <= ds.objects:
        return None
    if 1 <= rest <= ds.params_per_object:
        j = rest
        kind = "signal" if ds.params_per_object >= 2 and j == ds.params_per_object else "analog"
    elif 1 <= rest - CALC_OFFSET <= ds.calc_per_object:
        j = rest - CALC_OFFSET
        kind = "calculated"
    else:
        return None
    key = _key(ds.seed, pid)
    lo, hi = ds.period_range
    d = 1 + (j - 1) % DEVICES_PER_OBJECT
    r = [_unit_int(_key(key, salt)) for salt in (11, 12, 13, 14, 15)]
    return Param(
        id=pid, kind=kind, object_id=object_id, j=j,
        device_id=object_id * 100 + d, controller_id=object_id * 10 + d,
        tz=TIMEZONES[(object_id - 1) % len(TIMEZONES)],
        period_ms=(lo + _key(key, 10) % (hi - lo + 1)) * SECOND_MS,
        key=key, sample_key=_key(key, _SAMPLE), block_key=_key(key, _BLOCK),
        base=round(-20 + 120 * r[0], 1) if kind == "analog" else round(100 + 900 * r[0], 1),
        amp=1 + 19 * r[1] if kind == "analog" else 20 + 200 * r[1],
        noise=0.05 + 0.15 * r[2],
        block_ms=(5 + int(55 * r[3])) * 60_000,
    )


def _require(ds: Dataset, param_id: int) -> Param:
    p = ds.param(param_id)
    if p is None:
        raise KeyError(f"no parameter {param_id} in {ds}")
    return p


def _times(p: Param, start_ms: int, end_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """(t_k, hash_k) of every sample in [start, end], gaps removed. The low 32 bits of hash_k
    give the jitter, the high 32 bits the noise."""
    period = p.period_ms
    k = np.arange(start_ms // period - 1, end_ms // period + 1, dtype=np.int64)
    h = _hash(p.sample_key, k)
    t = (h & np.uint64(0xFFFFFFFF)) % np.uint64(period // 2)
    t = t.astype(np.int64)
    t += k * period
    first, last = np.searchsorted(t, start_ms, "left"), np.searchsorted(t, end_ms, "right")
    t, h = t[first:last], h[first:last]
    bounds = [b for day in range(start_ms // DAY_MS, end_ms // DAY_MS + 1) for b in _gap(p.key, day)]
    cuts = np.searchsorted(t, bounds).tolist()
    if all(a == b for a, b in zip(cuts[::2], cuts[1::2], strict=True)):
        return t, h
    keep = np.ones(len(t), dtype=bool)
    for a, b in zip(cuts[::2], cuts[1::2], strict=True):  # one slice per day, not per point
        keep[a:b] = False
    return t[keep], h[keep]


@functools.lru_cache(maxsize=65536)
def _gap(key: int, day: int) -> tuple[int, int]:
    """[start, end) of a parameter's gap on a UTC day (epoch day number)."""
    at = _key(key, _GAP_AT, day) % (DAY_MS - 90 * 60_000)
    length = (15 + _key(key, _GAP_LEN, day) % 76) * 60_000
    return day * DAY_MS + at, day * DAY_MS + at + length


# The daily cycle by second of the local day: lowest before dawn, highest mid-afternoon.
_CYCLE = -np.cos(np.arange(86400) * (2 * np.pi / 86400) - np.pi / 6)


def _values(p: Param, t: np.ndarray, h: np.ndarray) -> np.ndarray:
    if p.kind == "signal":
        block = (t + p.tz * HOUR_MS) // p.block_ms
        return ((_hash(p.block_key, block) & np.uint64(3)) == 0).astype(np.float64)
    x = _CYCLE.take((t // SECOND_MS + p.tz * 3600) % 86400)
    x *= p.amp
    x += p.base - p.amp * p.noise
    x += (h >> np.uint64(32)).astype(np.float64) * (2 * p.amp * p.noise / (1 << 32))
    return np.round(x, 3, out=x)


def raw_series(
    dataset: Any, param_id: int, start_ms: int, end_ms: int, now_ms: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Raw points of a parameter: (ts epoch ms int64, values float64), ascending, with
    start_ms <= ts <= end_ms and ts <= now_ms when given. `dataset`: see as_dataset."""
    p = _require(as_dataset(dataset), param_id)
    if now_ms is not None:
        end_ms = min(end_ms, now_ms)
    if end_ms < start_ms:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    t, h = _times(p, int(start_ms), int(end_ms))
    return t, _values(p, t, h)


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
    return (b, values[starts], np.maximum.reduceat(values, starts), np.minimum.reduceat(values, starts),
            values[ends])


def average_series(
    dataset: Any, param_id: int, start_ms: int, end_ms: int, now_ms: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(bucket starts, means): buckets b (UTC, 30 min) with start <= b <= end, mean of the raw
    points in [b, b + 30 min) (none later than now_ms), empty buckets left out."""
    lo, hi = bucket_span(start_ms, end_ms)
    return average_of(*raw_series(dataset, param_id, lo, hi, now_ms))


def candles_series(
    dataset: Any, param_id: int, start_ms: int, end_ms: int, now_ms: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(bucket starts, open, high, low, close) over the buckets of average_series."""
    lo, hi = bucket_span(start_ms, end_ms)
    return candles_of(*raw_series(dataset, param_id, lo, hi, now_ms))


# -- parameter status -----------------------------------------------------------------------------

STATUSES = {
    "none": {"id": 1, "statename": "No data", "statecolor": "none", "comment": "no value in the last hours"},
    "normal": {"id": 2, "statename": "Normal", "statecolor": "normal", "comment": "within limits"},
    "warning": {"id": 3, "statename": "Warning", "statecolor": "warning", "comment": "near a limit"},
    "error": {"id": 4, "statename": "Error", "statecolor": "error", "comment": "limit exceeded"},
    "critical": {"id": 5, "statename": "Critical", "statecolor": "critical", "comment": "far beyond a limit"},
}


def status_lookback_ms(p: Param) -> int:
    """How far back the last value is searched for (longer than any gap plus two periods)."""
    return 2 * HOUR_MS + 2 * p.period_ms


def status_of(p: Param, value: float | None) -> dict:
    """The status record for a parameter whose last value is `value` (None: no value)."""
    if value is None or value != value:
        name = "none"
    elif p.kind == "signal":
        name = "warning" if value else "normal"
    else:
        z = abs(value - p.base) / p.amp
        name = "normal" if z < 0.8 else "warning" if z < 0.95 else "error" if z < 1.05 else "critical"
    return STATUSES[name]


# -- records --------------------------------------------------------------------------------------

ANALOG_KINDS = (("temperature", "°C"), ("pressure", "kPa"), ("humidity", "%"), ("power", "kW"), ("flow", "m3/h"))
OBJECT_STATES = {1: {"id": 1, "objstatename": "new", "comment": "no controller installed or configured"},
                 2: {"id": 2, "objstatename": "active", "comment": "controllers online"}}
ZONES = [{"id": 1, "name": "North"}, {"id": 2, "name": "South"}, {"id": 3, "name": "East"}]
CLASSIFIERS = [
    {"id": 1, "name": "sensor", "description": "measuring sensor", "sys": True},
    {"id": 2, "name": "meter", "description": "utility meter", "sys": True},
    {"id": 3, "name": "actuator", "description": "valve or relay", "sys": False},
]
ROOM_TYPES = [{"id": 1, "name": "office"}, {"id": 2, "name": "plant room"}]
USER_LOCALE = "en"


def object_state(object_id: int) -> int:
    return 1 if object_id % 3 == 0 else 2


def object_short(object_id: int) -> dict:
    return {"id": object_id, "shortname": f"obj-{object_id}"}


def _param_tags(ds: Dataset, pid: int) -> list[str]:
    p = _require(ds, pid)
    if p.kind == "signal":
        return ["alarm"]
    if p.kind == "calculated":
        return ["energy", "calculated"]
    return [ANALOG_KINDS[(p.j - 1) % len(ANALOG_KINDS)][0]]


def object_full(ds: Dataset, object_id: int) -> dict:
    tz = TIMEZONES[(object_id - 1) % len(TIMEZONES)]
    state = object_state(object_id)
    tags = sorted({t for pid in ds.physical_ids(object_id) + ds.calc_ids(object_id) for t in _param_tags(ds, pid)})
    return {
        "id": object_id,
        "shortname": f"obj-{object_id}",
        "fullname": f"Object {object_id}",
        "comment": "",
        "zipcode": f"{100000 + object_id}",
        "timezone": tz,
        "area": 1000.0 + 250.5 * object_id,
        "latitude": round(40 + (object_id * 7.31) % 20, 4),
        "longitude": round(-100 + (object_id * 13.7) % 200, 4),
        "employees": 10 * object_id,
        "objrubric": {"id": 1 + object_id % 2, "shortname": "office" if object_id % 2 else "plant"},
        "sdirobjectstate": OBJECT_STATES[state],
        "worstparamstate": STATUSES["normal"] if state == 2 else STATUSES["none"],
        "worstparamcount": 0,
        "paramtags": tags,
        "calendar": {"id": 1, "name": "default", "description": "Mon-Fri working days"},
        "address": f"{object_id} Main Street",
        "controllersTotalCount": 0 if state == 1 else DEVICES_PER_OBJECT,
        "controllersOfflineCount": 0,
        "attrs": {"region": "north" if object_id % 2 else "south"},
    }


def object_by_id(ds: Dataset, object_id: int) -> dict:
    """The by-id answer: the full record, plus an operating mode for even ids."""
    record = object_full(ds, object_id)
    if object_id % 2 == 0:
        record["operatingMode"] = {"id": 1, "name": "auto"}
    return record


def units(object_id: int) -> list[dict]:
    out = []
    for d in range(1, DEVICES_PER_OBJECT + 1):
        device_id, controller_id = object_id * 100 + d, object_id * 10 + d
        out.append({
            "id": device_id,
            "name": f"unit-{device_id}",
            "deviceconnect": {
                "id": device_id * 10,
                "controller": {"id": controller_id, "name": f"controller-{controller_id}"},
                "device": {"id": device_id, "devicename": f"device-{device_id}"},
            },
        })
    return out


def rooms(object_id: int) -> list[dict]:
    return [{"id": object_id * 10 + t["id"], "name": f"{t['name']} {object_id}", "objectId": object_id,
             "sensorLocationId": t["id"]} for t in ROOM_TYPES]


def param_record(ds: Dataset, pid: int) -> dict:
    p = _require(ds, pid)
    tags = _param_tags(ds, pid)
    if p.kind == "calculated":
        return {"id": pid, "name": f"calc-{pid}", "type": "calculated", "objectId": p.object_id,
                "controllerId": p.controller_id, "unit": "kWh", "tags": tags,
                "formula": f"sum(p{p.object_id * 1000 + 1}) * 0.25"}
    name, unit = ("alarm", "") if p.kind == "signal" else ANALOG_KINDS[(p.j - 1) % len(ANALOG_KINDS)]
    return {"id": pid, "name": f"{name}-{pid}", "type": p.kind, "objectId": p.object_id,
            "controllerId": p.controller_id, "deviceId": p.device_id, "unit": unit, "tags": tags,
            "ctrability": p.j % 2 == 1, "locked": p.j % 3 == 0,
            "roomId": p.object_id * 10 + 1 + (p.j - 1) % len(ROOM_TYPES),
            "deviceClassifierId": 1 + (p.j - 1) % len(CLASSIFIERS)}


def param_short(record: dict) -> dict:
    return {"id": record["id"], "name": record["name"]}


def ext_commands(device_id: int) -> list[dict]:
    object_id, d = divmod(device_id, 100)
    device = {
        "id": device_id, "devicename": f"device-{device_id}", "devicetopic": f"site/{object_id}/dev/{device_id}",
        "devicetype": "LORAWAN" if d == 1 else "MQTT", "comment": "", "driverConfig": "{}",
        "productnumber": f"PN-{device_id:06d}", "vendorname": "Acme",
        "classifier": CLASSIFIERS[(d - 1) % len(CLASSIFIERS)],
        "hierarchyInstance": {"id": object_id, "hierarchyId": f"h-{object_id}", "name": f"Object {object_id}"},
        "protocolType": {"id": "lora" if d == 1 else "mqtt", "name": "LoRaWAN" if d == 1 else "MQTT"},
    }
    return [
        {"id": device_id * 10 + 1, "name": "reboot", "description": "restart the device", "cmd": "REBOOT",
         "data": "", "fport": 2, "device": device},
        {"id": device_id * 10 + 2, "name": "set-interval", "description": "set the reporting interval",
         "cmd": "SETINT", "data": "interval=60", "fport": 3, "device": device},
    ]


def user_record(index: int, login: str, control: bool = True) -> dict:
    return {
        "id": index + 1, "login": login, "firstname": login.title(), "lastname": "User", "middlename": "",
        "state": {"id": 1, "name": "active", "comment": "the user is active and may sign in"},
        "theme": 1, "ilocale": USER_LOCALE, "defaultScreen": 1, "soundOn": False, "comment": None,
        "authService": "LOCAL",
        "privileges": [{"id": 1, "name": "read"}, *([{"id": 2, "name": "control"}] if control else [])],
    }
