"""The test emulator: its settings, the window the tests export, and what its request log says."""

from __future__ import annotations

from typing import Any

from etl.timeutil import to_ms
from etl_emulator.config import EmulatorConfig

# A fixed clock far after the test windows, so "now" never cuts a window short.
NOW = "2026-11-20T00:00:00Z"
START = "2026-11-01T00:00:00Z"
END = "2026-11-03T00:00:00Z"
T0 = to_ms(START)


def emulator_config(**overrides: Any) -> EmulatorConfig:
    """2 objects of 3 physical parameters (the last a signal) and 1 calculated one, seed 7, clock at NOW."""
    base = dict(seed=7, objects=2, params_per_object=3, calc_per_object=1, now_ms=to_ms(NOW))
    base.update(overrides)
    return EmulatorConfig(**base)


def series_requests(emulator) -> list[dict]:
    """The series requests (raw, average, candles of every route) in an emulator's request log."""
    return [
        r
        for r in emulator.requests()
        if any(k in r["path"] for k in ("/db/measure", "/db/calcvalue", "/db/signal"))
    ]
