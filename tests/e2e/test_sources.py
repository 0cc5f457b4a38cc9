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


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_the_same_platform_under_another_host_name_stops_until_named(emulator, tmp_path, fmt):
    """127.0.0.1 becoming localhost in a config is the same server: without a source.name given on purpose,
    the run stops (exit 2) before it writes anything, rather than export every row again."""
    from etl.errors import ConfigError

    sections = dict(series=["raw"], window={"end": "2026-11-02T00:00:00Z"}, sink={"format": fmt})
    run(make_config(emulator.base_url, tmp_path, **sections))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
    renamed = emulator.base_url.replace("127.0.0.1", "localhost")

    with pytest.raises(ConfigError, match="already holds source '127.0.0.1' with checkpoints of 8 of the 8"):
        run(make_config(renamed, tmp_path, **sections))
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
    added = set(after) - set(before)
    assert all(p.parent.name == "_runs" for p in added) and {p: after[p] for p in before} == before

    # Named on purpose: the same platform keeps its name (nothing new); under another name given on purpose
    # it is still the platform the output holds (the same base URL): refused, with the way to rename it.
    same = make_config(renamed, tmp_path, source={"name": "127.0.0.1"}, **sections)
    assert not run(same).series
    other = make_config(renamed, tmp_path, source={"name": "localhost"}, **sections)
    rename = (
        "renaming a lake table's source is not supported: set source.name: 127.0.0.1"
        if fmt == "delta"
        else "etl state rename-source -c CONFIG --from 127.0.0.1; to keep it: set source.name: 127.0.0.1"
    )
    with pytest.raises(ConfigError, match=f"from this platform \\(http://localhost:.*{rename}"):
        run(other)
    # Another platform (its own base URL) is added on purpose under a name of its own.
    with run_emulator(emulator_config(seed=9)) as another:
        added = make_config(another.base_url, tmp_path, source={"name": "plant-c"}, **sections)
        assert run(added).series["raw"].points > 0
