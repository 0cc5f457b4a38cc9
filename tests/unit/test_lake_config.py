"""The lake tables' settings (sink.commit, sink.retention, sink.versions, sink.compact): parsed once, a
wrong one refused in one line naming its key."""

from __future__ import annotations

import pytest

from etl.config import SinkConfig, parse_config
from etl.errors import ConfigError
from etl.timeutil import DAY_MS


def config(**sink) -> dict:
    return {
        "source": {"base_url": "http://127.0.0.1:1/api", "username": "u", "password": "p"},
        "window": {"start": "2026-11-01T00:00:00Z"},
        "sink": {"format": "delta", "path": "out", **sink},
    }


def test_defaults_and_the_forms_each_setting_takes():
    sink = SinkConfig(path="out")
    assert (sink.commit.slabs, sink.commit.size, sink.commit.interval) == (64, 128 * 2**20, 60_000)
    assert (sink.retention, sink.versions, sink.compact) == (7 * DAY_MS, 50, 4)
    sink = parse_config(
        config(commit={"slabs": 8, "size": "64MB", "interval": "5m"}, retention="off", compact=0)
    ).sink
    assert (sink.commit.slabs, sink.commit.size, sink.commit.interval) == (8, 64_000_000, 300_000)
    assert sink.retention is None and sink.compact == 0
    assert parse_config(config(retention=False)).sink.retention is None  # YAML's bare `off`
    assert parse_config(config(retention="36h", commit={"size": "1GiB"})).sink.commit.size == 2**30


@pytest.mark.parametrize(
    "sink, words",
    [
        ({"commit": {"size": "lots"}}, "sink.commit.size: 'lots' is not a size"),
        ({"commit": {"slabs": 0}}, "sink.commit.slabs"),
        ({"retention": "forever"}, "sink.retention"),
        ({"versions": 1}, "sink.versions"),
    ],
)
def test_a_wrong_lake_setting_is_one_line(sink, words):
    with pytest.raises(ConfigError) as raised:
        parse_config(config(**sink))
    assert words in str(raised.value) and "\n" not in str(raised.value)
