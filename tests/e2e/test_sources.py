"""Several instances of the platform in one lake: `source.name` labels each one's rows, dimension
tables and checkpoints, so their (colliding) object and parameter ids never mix."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from etl.dataset.query import connect
from etl.timeutil import to_ms
from etl_emulator.server import run_emulator
from tests.support.configs import make_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, expected_table
from tests.support.output import checkpoints, read
from tests.support.pipeline import run

PLANTS = {"plant-a": 7, "plant-b": 8}  # source name -> the emulator's seed: other data, the same ids


@pytest.mark.parametrize(
    "partition_by", [["date"], ["source", "date"]], ids=["source column", "source partitions"]
)
def test_two_instances_land_in_one_lake_without_mixing(tmp_path, partition_by):
    configs = {}
    with (
        run_emulator(emulator_config(seed=PLANTS["plant-a"])) as a,
        run_emulator(emulator_config(seed=PLANTS["plant-b"])) as b,
    ):
        for (name, _), emulator in zip(PLANTS.items(), (a, b), strict=True):
            configs[name] = make_config(
                emulator.base_url, tmp_path, source={"name": name}, sink={"partition_by": partition_by}
            )
            run(configs[name])

    for series in SERIES:
        got = read(tmp_path, series)
        if "source" in partition_by:  # hive gives the partition's column back as a dictionary
            got = got.set_column(0, "source", got.column("source").cast(pa.string()))
        for name, seed in PLANTS.items():
            mine = got.filter(pc.equal(got.column("source"), name))
            want = expected_table(
                emulator_config(seed=seed), series, to_ms(START), to_ms(END), (1, 2), source=name
            )
            assert mine.select(want.column_names).equals(want), (series, name)
        assert got.num_rows == sum(
            expected_table(emulator_config(seed=s), series, to_ms(START), to_ms(END), (1, 2)).num_rows
            for s in PLANTS.values()
        )

    for name in PLANTS:  # each keeps its own checkpoints
        assert {row["param_id"] for row in checkpoints(tmp_path, source=name).rows()} == {
            1001,
            1002,
            1003,
            1501,
            2001,
            2002,
            2003,
            2501,
        }
    assert sorted(p.name for p in (tmp_path / "dimensions" / "parameters").iterdir()) == [
        "plant-a.parquet",
        "plant-b.parquet",
    ]

    # Names are joined within a source: each plant's rows carry its own parameters' names.
    con = connect(configs["plant-a"])
    rows = con.sql(
        "select source, count(*), count(param_name) from raw_named group by 1 order by 1"
    ).fetchall()
    assert [(r[0], r[1] == r[2]) for r in rows] == [("plant-a", True), ("plant-b", True)]
    dims = con.sql("select source, count(*) from parameters group by 1 order by 1").fetchall()
    assert dims == [("plant-a", 8), ("plant-b", 8)]


def test_the_default_source_is_the_host(emulator, tmp_path):
    config = make_config(emulator.base_url, tmp_path)
    assert config.source.name == "127.0.0.1"


def test_a_source_name_must_be_safe_in_paths(emulator, tmp_path):
    from etl.errors import ConfigError

    with pytest.raises(ConfigError, match="source.name: use letters, digits"):
        make_config(emulator.base_url, tmp_path, source={"name": "../plant a"})
