"""`etl pull` and `etl api series` take a bare parameter id of any kind: they find its list themselves
and read it through the route `etl run` would use (real CLI entry point, emulator over a socket)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from etl.model import Series
from etl.timeutil import iso, to_ms
from tests.support.cli import etl_main, sign_in_env
from tests.support.configs import config_dict, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, expected_table

# In the test emulator (3 physical, 1 calculated per object) the last physical one is a signal.
PARAMS = {"physical": 1001, "signal": 1003, "calculated": 1501}
BASE = "/sem-restservices"
ROUTES = {  # the series route each kind is read through, as in `etl run`
    ("signal", "raw"): f"{BASE}/db/signal/1003/",
    ("signal", "average"): f"{BASE}/db/measure/average/1003/",
    ("signal", "candles"): f"{BASE}/db/measure/candles/1003/",
    ("calculated", "raw"): f"{BASE}/db/calcvalue/1501/",
    ("calculated", "average"): f"{BASE}/db/calcvalue/average/1501/",
    ("calculated", "candles"): f"{BASE}/db/calcvalue/candles/1501/",
}
SIX = "2026-11-01T06:00:00Z"


@pytest.fixture
def env(monkeypatch, fresh_emulator):
    return sign_in_env(monkeypatch, fresh_emulator)


def want(series: str, param_id: int, start: str, end: str) -> pa.Table:
    table = expected_table(emulator_config(), series, to_ms(start), to_ms(end), objects=[param_id // 1000])
    return table.filter(pc.equal(table["param_id"], param_id))


def series_paths(emulator) -> list[str]:
    routes = tuple(f"{BASE}/db/{route}" for route in ("measure", "calcvalue", "signal"))
    return [r["path"] for r in emulator.requests() if r["path"].startswith(routes)]


@pytest.mark.parametrize("series", SERIES)
@pytest.mark.parametrize("kind", ["signal", "calculated"])
def test_pull_finds_the_kind_and_its_route(env, capsys, tmp_path, kind, series):
    param_id = PARAMS[kind]
    code, out, err = etl_main(
        capsys,
        "pull",
        str(param_id),
        "--from",
        START,
        "--to",
        END,
        "--kind",
        series,
        "-o",
        str(tmp_path / "p.parquet"),
    )
    expected = want(series, param_id, START, END).drop_columns(["source", "object_id"])
    assert code == 0 and err == "" and f"wrote {expected.num_rows:,} {series} points" in out
    got = pq.read_table(tmp_path / "p.parquet")
    assert got.num_rows > 0 and got.equals(expected)
    assert set(got.column("kind").to_pylist()) == {kind}
    paths = series_paths(env)
    assert paths and all(p.startswith(ROUTES[kind, series]) for p in paths), paths


@pytest.mark.parametrize("series", SERIES)
@pytest.mark.parametrize("kind", ["signal", "calculated"])
def test_api_series_finds_the_kind_and_its_route(env, capsys, kind, series):
    param_id = PARAMS[kind]
    code, out, err = etl_main(
        capsys, "api", "series", str(param_id), "--from", START, "--to", SIX, "--kind", series, "--json"
    )
    assert code == 0, err
    rows = [r for r in json.loads(out) if r["ts"] < iso(to_ms(SIX))]  # the platform includes the end too
    expected = want(series, param_id, START, SIX)
    assert rows and [r["ts"] for r in rows] == [
        iso(t) for t in expected.column("ts").cast(pa.int64()).to_pylist()
    ]
    for column in Series(series).value_columns:
        assert [r[column] for r in rows] == expected.column(column).to_pylist(), column
    assert [p for p in series_paths(env) if not p.startswith(ROUTES[kind, series])] == []


def test_lookup_asks_the_calculated_list_only_when_needed(env, capsys):
    for kind, lists in (
        ("physical", [f"{BASE}/db/contrdeviceparam"]),
        ("calculated", [f"{BASE}/db/contrdeviceparam", f"{BASE}/db/contrcalcparam"]),
    ):
        env.clear_requests()
        code, _, err = etl_main(capsys, "api", "series", str(PARAMS[kind]), "--from", START, "--to", SIX)
        assert code == 0, err
        assert [r["path"] for r in env.requests() if "param" in r["path"]] == lists


def test_an_unknown_parameter_is_one_line_with_exit_2(env, capsys, tmp_path):
    code, out, err = etl_main(
        capsys, "pull", "9999", "--from", START, "--to", END, "-o", str(tmp_path / "x.csv")
    )
    assert (code, out) == (2, "")
    assert (
        err
        == "etl: error: parameter 9999 is in neither parameter list (physical, calculated) of this login\n"
    )
    assert not (tmp_path / "x.csv").exists()


def test_pull_takes_the_connection_from_a_config_too(emulator, capsys, tmp_path, monkeypatch):
    for name in ("ETL_BASE_URL", "ETL_USERNAME", "ETL_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    path = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    code, out, err = etl_main(
        capsys,
        "pull",
        "2501",
        "-c",
        str(path),
        "--from",
        START,
        "--to",
        END,
        "--kind",
        "average",
        "-o",
        str(tmp_path / "a.csv"),
    )
    assert code == 0, err
    assert f"wrote {want('average', 2501, START, END).num_rows:,} average points of parameter 2501" in out
