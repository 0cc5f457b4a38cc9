"""Fixtures: a real emulator on a free port, and configs pointing at it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from etl.config import Config, parse_config
from etl.emulator.server import EmulatorConfig, RunningEmulator, run_emulator

# A fixed clock far after the test windows, so "now" never cuts a window short.
NOW = "2026-11-20T00:00:00Z"
START = "2026-11-01T00:00:00Z"
END = "2026-11-03T00:00:00Z"


def emulator_config(**overrides: Any) -> EmulatorConfig:
    from etl.timeutil import to_ms

    base = dict(seed=7, objects=2, params_per_object=3, calc_per_object=1, now_ms=to_ms(NOW))
    base.update(overrides)
    return EmulatorConfig(**base)


@pytest.fixture(scope="session")
def emulator() -> Iterator[RunningEmulator]:
    """One shared emulator for tests that do not change its faults or clock."""
    with run_emulator(emulator_config()) as running:
        yield running


@pytest.fixture
def fresh_emulator() -> Iterator[RunningEmulator]:
    """A private emulator for tests that inject faults or read the request log."""
    with run_emulator(emulator_config()) as running:
        yield running


def config_dict(base_url: str, out: Path, **sections: Any) -> dict:
    data = {
        "source": {"base_url": base_url, "username": "demo", "password": "demo"},
        "select": {"objects": "all"},
        "series": ["raw", "average", "candles"],
        "window": {"start": START, "end": END, "overlap": "1h"},
        "extract": {"concurrency": 8},
        "retry": {"attempts": 8, "backoff_initial": 0.01, "backoff_max": 0.2, "deadline": 60},
        "sink": {"format": "parquet", "path": str(out)},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return copy.deepcopy(data)


def make_config(base_url: str, out: Path, **sections: Any) -> Config:
    return parse_config(config_dict(base_url, out, **sections))


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path
