"""Configs pointing at a test emulator: as a dict to change, parsed, or written to a YAML file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from etl.config import Config, parse_config
from tests.support.emulator import END, START

# The environment S3 clients need against the test S3 server (moto), with the endpoint set beside it.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def config_dict(base_url: str, out: Path | str, **sections: Any) -> dict:
    """The test window of every series into `out` as Parquet, with quick retries; a section given as a
    dict is merged into the default one, anything else replaces it."""
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


def make_config(base_url: str, out: Path | str, **sections: Any) -> Config:
    return parse_config(config_dict(base_url, out, **sections))


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path
