"""When the reference tables' snapshot is kept and when it is fetched again (etl/pipeline/dimensions.py)."""

from __future__ import annotations

import pytest

from etl.config import parse_config
from etl.errors import ConfigError
from etl.pipeline.dimensions import due


def test_due():
    hour, day = 3_600_000, 86_400_000
    stale, note = due({}, [2, 1], "parquet", day, 10 * day)
    assert stale and note["fetched"] == 10 * day
    assert not due(note, [1, 2], "parquet", day, 10 * day + hour)[0]
    assert due(note, [1, 2], "parquet", day, 11 * day)[0]  # older than refresh
    assert due(note, [1, 2, 3], "parquet", day, 10 * day + hour)[0]  # other objects
    assert due(note, [1, 2], "delta", day, 10 * day + hour)[0]  # another sink
    assert due(note, [1, 2], "parquet", day, 10 * day - hour)[0]  # a clock that went back
    assert due({**note, "fetched": "yesterday"}, [1, 2], "parquet", day, 10 * day)[0]  # a damaged note
    assert due(note, [1, 2], "parquet", 0, 10 * day)[0]


def test_the_config_takes_a_bool_or_a_section():
    base = {
        "source": {"base_url": "http://h/x", "username": "u", "password": "p"},
        "window": {"start": "2026-11-01T00:00:00Z"},
        "sink": {"path": "out"},
    }
    assert parse_config({**base, "dimensions": False}).dimensions.enabled is False
    assert parse_config({**base, "dimensions": {"refresh": "6h"}}).dimensions.refresh == 6 * 3_600_000
    with pytest.raises(ConfigError, match="dimensions.refresh"):
        parse_config({**base, "dimensions": {"refresh": "soon"}})
