"""Odd records in the object listing and the parameter lists (emulator Faults.odd_records): a record that
cannot be used is left out alone, named on one line with exit 6, and never stops the rest of the run or
the runs after it; text that no file can hold is mended and said so."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow.parquet as pq
import pytest

import etl
from etl.errors import DataError
from etl.timeutil import DAY_MS, iso, to_ms
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact
from tests.support.configs import make_config
from tests.support.emulator import START, emulator_config
from tests.support.expected import SOURCE
from tests.support.output import checkpoints

DAY_END = iso(to_ms(START) + DAY_MS)
# kind -> (the objects whose series are exported, what the one line says)
LEFT_OUT = {
    "deep_record": ((2,), "record #1 of GET /db/object: nested deeper than the JSON parser reads"),
    "huge_id": ((1, 2), "is beyond 64 bits"),
    "text_id": ((1, 2), "(got 'abc')"),  # an object whose id is text (and a parameter too)
    "fractional_id": ((1, 2), "id 1001.5 is not an integer"),
}


@pytest.fixture(scope="module")
def odd() -> Iterator[RunningEmulator]:
    with run_emulator(emulator_config()) as running:
        yield running


def config(emulator: RunningEmulator, tmp_path):
    """Every run lists every object (`select.refresh: 0`): each meets the odd records the lists hold."""
    return make_config(
        emulator.base_url,
        tmp_path,
        series=["raw"],
        window={"end": DAY_END, "overlap": "0s"},
        select={"refresh": 0},
    )


@pytest.mark.parametrize("kind", sorted(LEFT_OUT))
def test_a_record_that_cannot_be_used_is_left_out_alone_run_after_run(odd, tmp_path, kind):
    odd.set_faults(reset=True, odd_records=[kind])
    objects, says = LEFT_OUT[kind]
    for _ in range(2):  # the bad record is still there: the next run is not blocked by it
        with pytest.raises(DataError, match="could not be used and are left out") as left_out:
            etl.run(config(odd, tmp_path))
        message = str(left_out.value)
        assert says in message and "\n" not in message
        assert left_out.value.summary.as_dict()["warnings"]["records_left_out"] >= 1
        assert_exact(tmp_path, START, DAY_END, objects=objects, series=["raw"])
    assert len(checkpoints(tmp_path))
    odd.set_faults(reset=True)


def test_a_lone_surrogate_in_a_name_is_written_as_a_replacement_character(odd, tmp_path, caplog):
    odd.set_faults(reset=True, odd_records=["surrogate_name"])
    caplog.set_level(logging.WARNING)
    for _ in range(2):  # no run is blocked by the name
        summary = etl.run(config(odd, tmp_path))
        assert summary.status == "ok"
    odd.set_faults(reset=True)
    assert "unpaired UTF-16 surrogate" in caplog.text  # and says so
    objects = pq.read_table(tmp_path / "dimensions" / "objects" / f"{SOURCE}.parquet").to_pylist()
    assert objects[0]["fullname"].endswith(" \ufffd")
    assert_exact(tmp_path, START, DAY_END, series=["raw"])
