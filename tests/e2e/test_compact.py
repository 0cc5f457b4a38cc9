"""`etl compact`: shard files of a partition merged into one, nothing lost or doubled, runs continue after."""

from __future__ import annotations

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from etl import run
from etl.cli import main
from etl.model import Shard
from etl.timeutil import to_ms
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SOURCE, expected_table
from tests.support.output import read_quality


def _files(root, series: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / series).rglob("*.parquet"))


def _table(root, series: str):
    return (
        ds.dataset(root / series, partitioning="hive")
        .to_table()
        .drop(["date"])
        .sort_by([("param_id", "ascending"), ("ts", "ascending")])
    )


def test_compact_merges_shard_files_and_later_runs_stay_exact(emulator, tmp_path, capsys):
    out = tmp_path / "out"
    config = make_config(emulator.base_url, out, series=["raw", "average"])
    for shard in (Shard(0, 2), Shard(1, 2)):
        run(config, shard=shard)
    single = tmp_path / "single"
    run(make_config(emulator.base_url, single, series=["raw"]))
    before = _files(out, "raw")
    # each shard fetched half of the parameters, but the dimension table names all of them
    assert pq.read_table(next((out / "dimensions" / "parameters").glob("*.parquet"))).num_rows == 8
    assert any("-s0of2-" in f for f in before) and any("-s1of2-" in f for f in before)

    path = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, out, series=["raw", "average"]))
    with pytest.raises(SystemExit) as code:
        main(["compact", "-c", str(path)])
    assert code.value.code == 0 and "file(s) merged away" in capsys.readouterr().out
    with pytest.raises(SystemExit) as code:  # done: it says so, as for an unsharded dataset
        main(["compact", "-c", str(path)])
    assert code.value.code == 0 and capsys.readouterr().out.startswith(
        "nothing to compact: every partition holds only its 1 bucket file(s) (sink.buckets)"
    )
    for series in ("raw", "average", "quality"):
        files = _files(out, series)
        assert files and all(f.rsplit("/", 1)[1].startswith(f"part-{SOURCE}-b") for f in files), files
        if series == "quality":
            assert read_quality(out).equals(read_quality(single)), series  # rows moved, none lost or doubled
            continue
        expected = expected_table(emulator_config(), series, to_ms(START), to_ms(END))
        assert _table(out, series).equals(expected)

    # A shard re-fetching its windows after compaction takes its rows back out of the merged file.
    run(config, shard=Shard(1, 2), full_refresh=True)
    assert _table(out, "raw").equals(expected_table(emulator_config(), "raw", to_ms(START), to_ms(END)))
