"""The reference tables (units, commands, lookups) are fetched again only when their snapshot is older
than `dimensions.refresh`, was taken of other objects, or is missing; objects and parameters are written
by every run (etl/pipeline/dimensions.py)."""

from __future__ import annotations

import pytest

from etl.client import MonitoringClient
from etl.errors import DataError, InvalidResponse
from etl.pipeline.dimensions import REFERENCES
from etl.sinks.layout import DIMENSIONS_FOLDER
from tests.support.configs import make_config
from tests.support.output import SOURCE
from tests.support.pipeline import run

ENDS = ("/unit", "/extcommand", "/db/zone", "/deviceclassifier", "/sensor_location", "/room")


def _reference_requests(emulator) -> int:
    found = sum(r["path"].endswith(ENDS) for r in emulator.requests())
    emulator.clear_requests()
    return found


def _config(emulator, out, **dimensions):
    return make_config(emulator.base_url, out, series=["average"], dimensions=dimensions or True)


def test_a_fresh_snapshot_is_kept_and_its_tables_stay(fresh_emulator, tmp_path):
    config = _config(fresh_emulator, tmp_path)
    first = run(config)
    assert _reference_requests(fresh_emulator) > len(REFERENCES)
    assert first.dimensions == ["objects", "units", "parameters", "commands", *REFERENCES[2:]]
    units = tmp_path / DIMENSIONS_FOLDER / "units" / f"{SOURCE}.parquet"
    before = units.read_bytes()

    second = run(config)
    assert _reference_requests(fresh_emulator) == 0
    assert second.dimensions == ["objects", "parameters"]
    assert units.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / DIMENSIONS_FOLDER).iterdir()) == sorted(
        ["objects", "parameters", *REFERENCES]
    )

    run(config, full_refresh=True)  # a full refresh fetches everything
    assert _reference_requests(fresh_emulator) > len(REFERENCES)


def test_refresh_zero_fetches_every_run(fresh_emulator, tmp_path):
    config = _config(fresh_emulator, tmp_path, refresh="0s")
    for _ in range(2):
        assert run(config).dimensions[1] == "units"
        assert _reference_requests(fresh_emulator) > len(REFERENCES)


def test_a_table_deleted_by_hand_is_fetched_again(fresh_emulator, tmp_path):
    config = _config(fresh_emulator, tmp_path)
    run(config)
    _reference_requests(fresh_emulator)
    (tmp_path / DIMENSIONS_FOLDER / "rooms" / f"{SOURCE}.parquet").unlink()
    (tmp_path / DIMENSIONS_FOLDER / "rooms").rmdir()
    assert "rooms" in run(config).dimensions
    assert (tmp_path / DIMENSIONS_FOLDER / "rooms" / f"{SOURCE}.parquet").exists()


def test_a_file_deleted_by_hand_from_its_folder_is_fetched_again(fresh_emulator, tmp_path):
    config = _config(fresh_emulator, tmp_path)
    run(config)
    (tmp_path / DIMENSIONS_FOLDER / "units" / f"{SOURCE}.parquet").unlink()  # the folder stays, empty
    assert "units" in run(config).dimensions
    assert (tmp_path / DIMENSIONS_FOLDER / "units" / f"{SOURCE}.parquet").exists()


def test_a_snapshot_with_a_failed_table_is_not_noted(fresh_emulator, tmp_path, monkeypatch):
    config = _config(fresh_emulator, tmp_path)

    async def broken(self):
        raise InvalidResponse("GET /db/zone: not the document's shape")

    with monkeypatch.context() as patched:
        patched.setattr(MonitoringClient, "zones", broken)
        with pytest.raises(DataError, match="dimension table zones"):
            run(config)
    _reference_requests(fresh_emulator)
    assert "zones" in run(config).dimensions  # not kept: the failed run noted nothing
    assert _reference_requests(fresh_emulator) > len(REFERENCES)
    assert run(config).dimensions == ["objects", "parameters"]
