"""When points reach the platform: a live platform serves a point some time after its stamp.

Three ways, each a pure function of (parameter, stamp, the clock), so any window asked at any time
gives the same answer and tests can recompute it:

- `lag`: a parameter's points show `lag` ms after their stamps (a slow link, a late calculation);
- `offline`: a controller's points stamped in [start, end) show all at once at `end`, as a
  controller back online uploads its backlog;
- `revise`: a calculated parameter's value is first served preliminary and replaced by its final
  value `revise` ms after its stamp (a recalculation);
- `quiet`: a parameter has no point stamped in [start, end) at all (a sensor unplugged; one that comes
  back at `end`, or never);
- `no_controller`: objects without a controller (state 1, "new"): none of their parameters has a point.

With no clock (`now` None) every point is shown with its final value: what the platform ends up with.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


def _pairs(value: Mapping[Any, Any] | Iterable[Iterable[Any]] | None) -> tuple[tuple[int, int], ...]:
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((int(k), int(v)) for k, v in items))


@dataclass(frozen=True)
class Lateness:
    """`lag`: (param_id, ms) pairs; `offline`: (controller_id, start_ms, end_ms) triples; `revise`:
    (param_id, ms) pairs. Accepts mappings and lists (JSON) too."""

    lag: tuple[tuple[int, int], ...] = ()
    offline: tuple[tuple[int, int, int], ...] = ()
    revise: tuple[tuple[int, int], ...] = ()
    quiet: tuple[tuple[int, int, int], ...] = ()
    no_controller: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "lag", _pairs(self.lag))
        object.__setattr__(self, "revise", _pairs(self.revise))
        for name in ("offline", "quiet"):
            spans = tuple(sorted((int(c), int(a), int(b)) for c, a, b in getattr(self, name)))
            if any(b < a for _, a, b in spans):
                raise ValueError(f"{name} spans need start <= end")
            object.__setattr__(self, name, spans)
        if any(ms < 0 for _, ms in (*self.lag, *self.revise)):
            raise ValueError("lag and revise take non-negative milliseconds")
        object.__setattr__(self, "no_controller", tuple(sorted(int(o) for o in self.no_controller)))

    def __bool__(self) -> bool:
        return bool(self.lag or self.offline or self.revise or self.quiet or self.no_controller)

    @classmethod
    def of(cls, value: Lateness | Mapping[str, Any] | None) -> Lateness:
        if isinstance(value, Lateness):
            return value
        return cls(**(value or {}))

    def as_dict(self) -> dict[str, Any]:
        return {
            "lag": [list(p) for p in self.lag],
            "offline": [list(s) for s in self.offline],
            "revise": [list(p) for p in self.revise],
            "quiet": [list(s) for s in self.quiet],
            "no_controller": list(self.no_controller),
        }

    def absent(self, param_id: int, object_id: int, ts: np.ndarray) -> np.ndarray | None:
        """Which of these stamps have no point at all: a quiet span, an object without a controller
        (None: none)."""
        if object_id in self.no_controller:
            return np.ones(len(ts), bool)
        spans = [(a, b) for p, a, b in self.quiet if p == param_id]
        if not spans:
            return None
        return _within(ts, spans)

    def offline_controllers(self, controllers: Iterable[int], now: int | None) -> int:
        """How many of these controllers are offline at `now`."""
        return sum(
            1 for c in controllers if now is not None and any(a <= now < b for a, b in self.outages(c))
        )

    def lag_of(self, param_id: int) -> int:
        return _lookup(self.lag).get(param_id, 0)

    def revise_of(self, param_id: int) -> int:
        return _lookup(self.revise).get(param_id, 0)

    def outages(self, controller_id: int) -> list[tuple[int, int]]:
        return [(a, b) for c, a, b in self.offline if c == controller_id]

    def shown_until(self, param_id: int, now: int) -> int:
        """The latest stamp of this parameter the platform shows at `now` (offline spans aside)."""
        return now - self.lag_of(param_id)

    def hidden(self, controller_id: int, ts: np.ndarray, now: int) -> np.ndarray | None:
        """Which of these stamps an offline controller has not uploaded yet at `now` (None: none)."""
        spans = [(a, b) for a, b in self.outages(controller_id) if now < b]
        if not spans:
            return None
        return _within(ts, spans)

    def preliminary(self, param_id: int, ts: np.ndarray, now: int) -> np.ndarray | None:
        """Which of these stamps still carry a preliminary value at `now` (None: none)."""
        delay = self.revise_of(param_id)
        if not delay:
            return None
        mask = ts > now - delay
        return mask if mask.any() else None

    def settled(self, param_id: int, controller_id: int, now: int) -> int:
        """Stamps before this never change their answer again after `now`: what a cache may keep."""
        limit = now - max(self.lag_of(param_id), self.revise_of(param_id))
        for a, b in self.outages(controller_id):
            if now < b:
                limit = min(limit, a)
        return limit


@functools.lru_cache(maxsize=64)
def _lookup(pairs: tuple[tuple[int, int], ...]) -> dict[int, int]:
    return dict(pairs)


def _within(ts: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray | None:
    """Which of these sorted stamps fall in any of `spans` (None: none)."""
    mask = np.zeros(len(ts), bool)
    for a, b in spans:
        lo, hi = np.searchsorted(ts, [a, b])
        mask[lo:hi] = True
    return mask if mask.any() else None
