"""What an output holds is kept (etl/pipeline/identity.py): a run whose source.name, sink.format or
sink.partition_by differs from what the output holds stops with one line (exit 2) before it writes
anything, and `etl state rename-source` moves a source's rows under a new name, each row once, also when
killed and run again (etl/pipeline/rename.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from etl.config import load_config
from etl.dataset.query import connect
from etl.state import StateStore
from etl.storage.atomic import Storage
from tests.support.cli import etl
from tests.support.configs import config_dict, write_config
from tests.support.expected import SERIES
from tests.support.output import read

DAY_END = "2026-11-02T00:00:00Z"
HOST = "127.0.0.1"


def _config(emulator, folder: Path, **sections) -> Path:
    data = config_dict(emulator.base_url, folder / "out", window={"end": DAY_END}, **sections)
    data["source"]["password"] = "${ETL_PASSWORD}"
    return write_config(folder / f"c{len(list(folder.glob('c*.yaml')))}.yaml", data)


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def _one_line(result, *words: str) -> str:
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("etl: error: ") and all(w in line for w in words), line
    return line


def _rows(config: Path) -> dict[str, list[tuple]]:
    """Every row of every series and of the quality dataset as `etl query` reads them, source aside, and
    their sources."""
    con = connect(load_config(config, offline=True))
    found = {}
    for name in [*SERIES, "quality"]:
        found[name] = con.sql(f"select * exclude (source) from {name} order by all").fetchall()
        found[f"{name} sources"] = [s for (s,) in con.sql(f"select distinct source from {name}").fetchall()]
    return found


@pytest.fixture(scope="module")
def golden(emulator, tmp_path_factory) -> Path:
    """One day of every series under the default source name (the host), as Parquet."""
    folder = tmp_path_factory.mktemp("identity")
    result = etl("run", "-c", str(_config(emulator, folder)), "--no-progress")
    assert result.returncode == 0, result.stderr
    return folder / "out"


@pytest.fixture
def existing(golden, tmp_path) -> Path:
    shutil.copytree(golden, tmp_path / "out")
    return tmp_path / "out"


@pytest.mark.parametrize(
    "sections, words",
    [
        (
            {"source": {"name": "plant"}},
            [
                f"source.name: the output already holds source '{HOST}' with checkpoints of 8 of the 8",
                "from this platform (http://127.0.0.1:",
                f"etl state rename-source -c CONFIG --from {HOST}; to keep it: set source.name: {HOST}",
            ],
        ),
        (
            {"sink": {"format": "delta"}},
            [
                f"sink.format: {{out}} holds source '{HOST}' as parquet",
                "set sink.format: parquet, or give delta",
            ],
        ),
        ({"sink": {"format": "csv"}}, ["sink.format:", "as parquet", "set sink.format: parquet"]),
        (
            {"sink": {"partition_by": ["date", "object_id"]}},
            [
                "sink.partition_by: {out} holds source",
                "partitioned by [date]",
                "set sink.partition_by: [date]",
            ],
        ),
    ],
    ids=["source.name added", "format delta", "format csv", "partition_by"],
)
def test_an_identity_change_stops_before_writing(emulator, existing, tmp_path, sections, words):
    before = _files(existing)
    result = etl("run", "-c", str(_config(emulator, tmp_path, **sections)), "--no-progress")
    _one_line(result, *(w.format(out=existing) for w in words))
    after = _files(existing)
    added = [rel for rel in after if rel not in before]
    assert all(rel.startswith("_runs/") for rel in added) and {k: after[k] for k in before} == before
    assert not (existing / "raw" / "_delta_log").exists() and not (existing / "catalog.db").exists()


def test_an_older_record_is_read_from_the_reference_tables_note(emulator, existing, tmp_path):
    """An output recorded before the format was (layout.json holds its files per partition only): the
    reference tables' note in the state says which format wrote them."""
    (existing / "_state" / HOST / "layout.json").write_text('{"buckets": 1}')
    result = etl("run", "-c", str(_config(emulator, tmp_path, sink={"format": "delta"})), "--no-progress")
    _one_line(result, "sink.format:", f"as parquet ({existing}/_state/{HOST}/dimensions.json)")


@pytest.mark.parametrize("fmt, partition_by", [("parquet", ["date"]), ("csv", ["source", "date"])])
def test_rename_source_moves_every_row_once(emulator, tmp_path, fmt, partition_by):
    sink = {"format": fmt, "partition_by": partition_by}
    first = _config(emulator, tmp_path, sink=sink)
    assert etl("run", "-c", str(first), "--no-progress").returncode == 0
    out = tmp_path / "out"
    want = _rows(first)
    named = _config(emulator, tmp_path, sink=sink, source={"name": "plant"})
    _one_line(etl("run", "-c", str(named), "--no-progress"), "etl state rename-source -c CONFIG --from")

    result = etl("state", "rename-source", "-c", str(named), "--from", HOST)
    assert result.returncode == 0 and result.stdout.startswith(f"renamed source '{HOST}' to 'plant'"), result
    got = _rows(named)
    for name in [*SERIES, "quality"]:
        assert got[name] == want[name] and got[f"{name} sources"] == ["plant"], name
    assert not (out / "_state" / HOST).exists() and not list(out.rglob(f"*{HOST}*"))
    assert StateStore(Storage(str(out / "_state" / "plant"))).layout().source == "plant"
    con = connect(load_config(named, offline=True))
    assert con.sql("select distinct source from objects").fetchall() == [("plant",)]
    assert con.sql("select count(*) from raw").fetchall() == [(len(want["raw"]),)]

    again = etl("run", "-c", str(named), "--no-progress", "--json")  # nothing new: the checkpoints moved too
    assert again.returncode == 0 and json.loads(again.stdout)["series"] == {}, again.stderr
    assert _rows(named) == got
    _one_line(etl("run", "-c", str(first), "--no-progress"), "already holds source 'plant'")


@pytest.mark.parametrize("where", ["files", "state"])
def test_a_rename_killed_midway_finishes_when_run_again(emulator, existing, tmp_path, monkeypatch, where):
    """Killed while moving files or checkpoints: a run of either name stops saying so; the command run
    again finishes, every row once."""
    from etl.pipeline import rename

    named = _config(emulator, tmp_path, source={"name": "plant"})
    want = _rows(named)
    calls = {"n": 0}

    def files_killed(*args, **kwargs):  # the second dataset's files: the first one's are moved
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return rename_layout(*args, **kwargs)

    def state_killed(here, there, config):  # one checkpoint file copied of several
        first = next(r for r in here.find("") if r.endswith(".json") and "/" in r)
        there.write_atomic(first, here.read(first))
        raise KeyboardInterrupt

    rename_layout = rename.rename_layout
    if where == "files":
        monkeypatch.setattr(rename, "rename_layout", files_killed)
    else:
        monkeypatch.setattr(rename, "_copy_state", state_killed)
    with pytest.raises(KeyboardInterrupt):
        rename.rename_source(load_config(named, offline=True), HOST)
    monkeypatch.undo()
    for config in (named, _config(emulator, tmp_path)):
        _one_line(
            etl("run", "-c", str(config), "--no-progress"),
            f"renaming source '{HOST}' to 'plant' did not finish: run etl state rename-source",
        )
    result = etl("state", "rename-source", "-c", str(named), "--from", HOST)
    assert result.returncode == 0, result.stderr
    got = _rows(named)
    assert {k: v for k, v in got.items() if "sources" not in k} == {
        k: v for k, v in want.items() if "sources" not in k
    }
    assert all(v == ["plant"] for k, v in got.items() if "sources" in k)
    assert etl("run", "-c", str(named), "--no-progress").returncode == 0


def test_rename_source_refuses_what_it_cannot_do_well(emulator, existing, tmp_path):
    lake = _config(emulator, tmp_path, sink={"format": "delta"}, source={"name": "plant"})
    _one_line(
        etl("state", "rename-source", "-c", str(lake), "--from", HOST),
        "renaming a lake table's source is not supported (sink.format delta): set source.name: 127.0.0.1",
    )
    named = _config(emulator, tmp_path, source={"name": "plant"})
    _one_line(etl("state", "rename-source", "-c", str(named), "--from", "nope"), "holds no source 'nope'")
    _one_line(etl("state", "rename-source", "-c", str(named), "--from", "../x"), "--from: use letters")
    same = _config(emulator, tmp_path)
    _one_line(
        etl("state", "rename-source", "-c", str(same), "--from", HOST), "source.name is '127.0.0.1' already"
    )
    data = yaml.safe_load(named.read_text())
    data["sink"]["path"] = str(tmp_path / "other")
    other = write_config(tmp_path / "other.yaml", data)
    assert etl("run", "-c", str(other), "--no-progress").returncode == 0
    shutil.copytree(tmp_path / "other" / "_state" / "plant", existing / "_state" / "plant")
    _one_line(
        etl("state", "rename-source", "-c", str(named), "--from", HOST),
        "source 'plant' has checkpoints already",
    )
    assert pc.equal(read(existing, "raw").column("source"), HOST).to_pylist().count(True) > 0


def test_a_moved_state_path_is_warned_of_and_doubles_nothing(emulator, existing, tmp_path):
    """No checkpoints of the source where state.path now points, but its rows in the output: the run says
    so, fetches the window again, and its rows replace their copies."""
    config = _config(emulator, tmp_path, state={"path": str(tmp_path / "elsewhere")})
    want = _rows(config)
    result = etl("run", "-c", str(config), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert f"holds no checkpoints of source '{HOST}', but {existing} holds its rows" in result.stderr
    assert "if state.path moved, set it back" in result.stderr
    assert _rows(config) == want
