"""Analyst commands: `etl query` (DuckDB views), `etl pull` (one-off export), `etl plot` (PNG).
The gaps a plot breaks its lines at, on their own: tests/unit/dataset/test_gaps.py."""

from __future__ import annotations

import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from etl.cli import cli
from etl.errors import NothingToRead
from etl.timeutil import DAY_MS, to_ms
from tests.support.cli import connection_env, etl
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, expected_table
from tests.support.pipeline import run

VIEWS = {
    "raw",
    "average",
    "candles",
    "raw_named",
    "average_named",
    "candles_named",
    "objects",
    "units",
    "parameters",
    "zones",
    "classifiers",
    "room_types",
    "rooms",
    "commands",
    "quality",
    "quality_named",
}


@pytest.fixture(scope="module")
def lake(emulator, tmp_path_factory):
    """One run's output and its config file."""
    root = tmp_path_factory.mktemp("lake")
    run(make_config(emulator.base_url, root / "out"))
    return write_config(root / "c.yaml", config_dict(emulator.base_url, root / "out"))


def invoke(*args: str, env: dict | None = None):
    result = CliRunner(env=env).invoke(cli, list(args), catch_exceptions=True)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


def want(series: str, param_id: int | None = None, start: str = START, end: str = END) -> pa.Table:
    table = expected_table(emulator_config(), series, to_ms(start), to_ms(end))
    return table if param_id is None else table.filter(pc.equal(table["param_id"], param_id))


def test_query_registers_series_dimension_and_named_views(lake):
    assert set(invoke("query", "-c", str(lake)).split()) == VIEWS
    for series in SERIES:
        count = invoke("query", "-c", str(lake), f"select count(*) as n from {series}").split()
        assert count == ["n", str(want(series).num_rows), "(1", "row)"], series
    # *_named joins names to ids: every row named, as the dimension tables spell them
    named = invoke(
        "query",
        "-c",
        str(lake),
        "select param_id, param_name, object_name, count(*) as n from raw_named "
        "group by all order by param_id",
    )
    *lines, count = named.splitlines()
    assert lines[0].split() == ["param_id", "param_name", "object_name", "n"] and len(lines) == 1 + 8
    assert count == "(8 rows)"
    con = duckdb.connect()
    names = dict(
        con.sql(f"select id, name from '{lake.parent}/out/dimensions/parameters/*.parquet'").fetchall()
    )
    for line in lines[1:]:
        param_id, *_ = line.split()
        assert names[int(param_id)] in line and "NULL" not in line and "NaN" not in line


def test_query_writes_csv_and_parquet(lake, tmp_path):
    sql = "select param_id, ts, open, high, low, close from candles order by param_id, ts"
    assert "wrote" in invoke("query", "-c", str(lake), sql, "-o", str(tmp_path / "c.parquet"))
    assert "wrote" in invoke("query", "-c", str(lake), sql, "-o", str(tmp_path / "c.csv"))
    expected = want("candles").select(["param_id", "ts", "open", "high", "low", "close"])
    from_parquet = pq.read_table(tmp_path / "c.parquet")
    assert from_parquet.num_rows == expected.num_rows
    assert from_parquet.column("close").to_pylist() == expected.column("close").to_pylist()
    from_csv = pcsv.read_csv(tmp_path / "c.csv")
    assert from_csv.column_names == expected.column_names and from_csv.num_rows == expected.num_rows


def test_query_error_is_one_line_with_exit_2(lake):
    result = etl("query", "-c", str(lake), "select nope from raw", timeout=60)
    errors = [line for line in result.stderr.splitlines() if line.startswith("etl: error")]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(errors) == 1 and errors[0].startswith("etl: error: query failed: Binder Error"), result.stderr


def test_pull_is_chunked_and_retried_with_the_connection_from_env(fresh_emulator, tmp_path):
    env = connection_env(fresh_emulator.base_url)
    end = "2026-11-04T00:00:00Z"
    fresh_emulator.set_faults(error_rate=0.3, seed=3)
    out = invoke("pull", "1001", "--from", START, "--to", end, "-o", str(tmp_path / "raw.parquet"), env=env)
    expected = want("raw", 1001, end=end)
    assert f"wrote {expected.num_rows:,} raw points of parameter 1001" in out
    assert pq.read_table(tmp_path / "raw.parquet").equals(expected.drop_columns(["source", "object_id"]))
    requests = [
        r for r in fresh_emulator.requests() if r["path"].startswith("/sem-restservices/db/measure/1001/")
    ]
    assert all(r["interval_ms"] <= DAY_MS for r in requests)  # raw in 24 h windows
    whole_days = [r for r in requests if r["status"] == 200 and r["interval_ms"] == DAY_MS]
    assert (
        len(whole_days) == 3
    )  # one answer per day (and maybe an ask for the rest of one: no silent cap here)
    assert any(r["status"] >= 500 for r in fresh_emulator.requests())  # some failed and were retried

    fresh_emulator.set_faults(reset=True)
    invoke(
        "pull",
        "1501",
        "--series",
        "candles",
        "--from",
        START,
        "--to",
        end,
        "-o",
        str(tmp_path / "candles.csv"),
        env=env,
    )
    got = pcsv.read_csv(tmp_path / "candles.csv")
    assert got.column("close").to_pylist() == want("candles", 1501, end=end).column("close").to_pylist()


def test_pull_without_a_connection_names_what_is_missing(tmp_path):
    unset = {name: None for name in os.environ if name.startswith("ETL_")}
    args = ["pull", "1001", "--from", START, "--to", END, "-o", str(tmp_path / "x.csv")]
    result = etl(*args, password=None, env=unset, timeout=60)
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "etl: error: no connection: pass --config FILE or set ETL_BASE_URL, ETL_USERNAME, ETL_PASSWORD"
    )


def test_plot_writes_a_png_of_a_series(lake, tmp_path):
    for series, param in (("raw", 1001), ("candles", 2501), ("raw", 2003)):  # physical, calculated, signal
        png = tmp_path / f"{series}.png"
        out = invoke(
            "plot",
            "-c",
            str(lake),
            str(param),
            "--from",
            START,
            "--to",
            END,
            "--series",
            series,
            "-o",
            str(png),
        )
        assert out.strip() == f"plotted {want(series, param).num_rows:,} points to {png}"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with pytest.raises(NothingToRead, match="no raw points of parameter 9999"):
        invoke(
            "plot", "-c", str(lake), "9999", "--from", START, "--to", END, "-o", str(tmp_path / "none.png")
        )


def test_dimension_tables_are_snake_case_and_typed(lake):
    out = lake.parent / "out"
    con = duckdb.connect()
    params = con.sql(f"select * from '{out}/dimensions/parameters/*.parquet'")
    types = dict(zip(params.columns, [str(t) for t in params.types], strict=True))
    assert {"object_id", "controller_id", "device_id", "room_id", "device_classifier_id", "unit"} <= set(
        types
    )
    assert not [c for c in types if c != c.lower()]  # no objectId, deviceId ...
    assert types["tags"] == "VARCHAR[]" and types["object_id"] == "BIGINT" and types["locked"] == "BOOLEAN"
    tags = dict(con.sql(f"select id, tags from '{out}/dimensions/parameters/*.parquet'").fetchall())
    assert tags[1003] == ["alarm"] and tags[1501] == ["energy", "calculated"]
    objects = con.sql(
        f"select paramtags, sdirobjectstate.objstatename, controllers_total_count "
        f"from '{out}/dimensions/objects/*.parquet' order by id"
    ).fetchall()
    assert objects[0] == (["alarm", "calculated", "energy", "pressure", "temperature"], "active", 2)
    device = con.sql(
        f"select deviceconnect.device.id from '{out}/dimensions/units/*.parquet' order by id"
    ).fetchall()
    assert device[0] == (101,)


def test_plot_titles_with_object_parameter_and_unit_and_breaks_lines_at_gaps(lake, tmp_path):
    from PIL import Image

    for param, title, unit in (
        (1001, "obj-1 / temperature-1001 [°C]", "°C"),
        (2003, "obj-2 / alarm-2003", None),
    ):
        png = tmp_path / f"{param}.png"
        invoke("plot", "-c", str(lake), str(param), "--from", START, "--to", END, "-o", str(png))
        info = Image.open(png).info
        assert info["Title"] == f"{title}: raw", info
        assert info["Description"] == "2 gaps"  # the emulator's gap of each day, drawn as a break
        assert unit is None or unit in title


def test_query_prints_a_table_with_its_row_count(lake):
    rows = invoke(
        "query", "-c", str(lake), "select param_id, ts, value from raw order by param_id, ts"
    ).splitlines()
    assert rows[0].split() == ["param_id", "ts", "value"] and len(rows) == 1 + 100 + 1
    assert rows[1].split()[1].endswith("Z") and rows[-1].startswith("(the first 100 rows; more follow")
    assert invoke("query", "-c", str(lake), "select * from raw where false").splitlines() == [
        "source  object_id  param_id  kind  ts  value  date",
        "(no rows)",
    ]
