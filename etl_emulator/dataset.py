"""The shape of the emulated platform and each parameter's constants, drawn from the seed.

Everything here is a pure function of the Dataset: ids follow from arithmetic, and a parameter's
constants (sampling period, level, noise...) are hashed from (seed, id) when first asked for, so a
fleet of any size costs nothing until its parameters are used.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from etl_emulator.lateness import Lateness

SECOND_MS = 1000
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
TIMEZONES = (3, 0, -5, 5, 9, -8, 1)
DEVICES_PER_OBJECT = 2
CALC_OFFSET = 500

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
# Salts keep the hash streams of one parameter independent.
SAMPLE_SALT, GAP_AT_SALT, GAP_LEN_SALT, BLOCK_SALT = 1, 2, 3, 4


def _mix_int(x: int) -> int:
    """splitmix64 finaliser on a Python int (for per-parameter constants)."""
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def stream_key(*parts: int) -> int:
    """A 64-bit key hashed from integers: names one independent stream of draws."""
    h = 0
    for part in parts:
        h = _mix_int(h ^ (part & _M64))
    return h


def hash_stream(key: int, k: np.ndarray) -> np.ndarray:
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
    lateness: Lateness = Lateness()
    # The fleet as it changed while serving (the control API's `fleet`): parameters added beyond the
    # shape (analog below CALC_OFFSET, calculated above) and parameters removed; both sorted.
    added: tuple[int, ...] = ()
    removed: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "lateness", Lateness.of(self.lateness))
        for name in ("added", "removed"):
            object.__setattr__(self, name, tuple(sorted({int(i) for i in getattr(self, name)})))
        for pid in self.added:
            object_id, rest = divmod(pid, 1000)
            if not (1 <= object_id <= self.objects and 1 <= rest < 1000 and rest != CALC_OFFSET):
                raise ValueError(f"added: {pid} is no parameter id of objects 1..{self.objects}")
        lo, hi = self.period_range
        if not 1 <= lo <= hi:
            raise ValueError(f"period_range must be 1 <= MIN <= MAX seconds, got {lo}:{hi}")
        if not (0 <= self.params_per_object < CALC_OFFSET and 0 <= self.calc_per_object < 1000 - CALC_OFFSET):
            raise ValueError(
                f"at most {CALC_OFFSET - 1} physical and {999 - CALC_OFFSET} calculated parameters per object"
            )
        object.__setattr__(self, "period_range", (int(lo), int(hi)))

    @property
    def object_ids(self) -> range:
        return range(1, self.objects + 1)

    def physical_ids(self, object_id: int) -> list[int]:
        return self._ids(object_id, 1, self.params_per_object, range(1, CALC_OFFSET))

    def calc_ids(self, object_id: int) -> list[int]:
        return self._ids(object_id, CALC_OFFSET + 1, self.calc_per_object, range(CALC_OFFSET + 1, 1000))

    def _ids(self, object_id: int, first: int, count: int, added: range) -> list[int]:
        base = object_id * 1000
        ids = [base + first + j for j in range(count)]
        if self.added:
            ids += [p for p in self.added if p - base in added and p not in ids]
        return [p for p in ids if p not in self.removed] if self.removed else ids

    def kind(self, param_id: int) -> str | None:
        """ "analog", "signal" or "calculated" by arithmetic alone; None when there is no such id."""
        object_id, rest = divmod(int(param_id), 1000)
        if not 1 <= object_id <= self.objects or param_id in self.removed:
            return None
        if 1 <= rest <= self.params_per_object:
            return "signal" if self.params_per_object >= 2 and rest == self.params_per_object else "analog"
        if 1 <= rest - CALC_OFFSET <= self.calc_per_object:
            return "calculated"
        if param_id in self.added:
            return "analog" if rest < CALC_OFFSET else "calculated"
        return None

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
        seed=source.seed,
        objects=source.objects,
        params_per_object=source.params_per_object,
        calc_per_object=source.calc_per_object,
        period_range=tuple(source.period_range),
        lateness=Lateness.of(getattr(source, "lateness", None)),
    )


@functools.lru_cache(maxsize=65536)
def _param(ds: Dataset, pid: int) -> Param | None:
    kind = ds.kind(pid)
    if kind is None:
        return None
    object_id, rest = divmod(pid, 1000)
    j = rest - CALC_OFFSET if kind == "calculated" else rest
    key = stream_key(ds.seed, pid)
    lo, hi = ds.period_range
    d = 1 + (j - 1) % DEVICES_PER_OBJECT
    r = [_unit_int(stream_key(key, salt)) for salt in (11, 12, 13, 14, 15)]
    return Param(
        id=pid,
        kind=kind,
        object_id=object_id,
        j=j,
        device_id=object_id * 100 + d,
        controller_id=object_id * 10 + d,
        tz=TIMEZONES[(object_id - 1) % len(TIMEZONES)],
        period_ms=(lo + stream_key(key, 10) % (hi - lo + 1)) * SECOND_MS,
        key=key,
        sample_key=stream_key(key, SAMPLE_SALT),
        block_key=stream_key(key, BLOCK_SALT),
        base=round(-20 + 120 * r[0], 1) if kind == "analog" else round(100 + 900 * r[0], 1),
        amp=1 + 19 * r[1] if kind == "analog" else 20 + 200 * r[1],
        noise=0.05 + 0.15 * r[2],
        block_ms=(5 + int(55 * r[3])) * 60_000,
    )


def require(dataset: Any, param_id: int) -> Param:
    """The parameter, or KeyError. `dataset`: see as_dataset."""
    ds = as_dataset(dataset)
    p = ds.param(param_id)
    if p is None:
        raise KeyError(f"no parameter {param_id} in {ds}")
    return p
