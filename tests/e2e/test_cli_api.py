"""`etl api ...` explorer commands through the real CLI entry point against the emulator over a socket."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import etl_main, sign_in_env


@pytest.fixture
def env(monkeypatch, emulator):
    return sign_in_env(monkeypatch, emulator)


def test_read_commands_print_tables_and_json(env, capsys):
    code, out, _ = etl_main(capsys, "api", "objects")
    assert code == 0 and out.splitlines()[0].split()[:2] == ["id", "shortname"] and "obj-2" in out
    code, out, _ = etl_main(capsys, "api", "objects", "--json")
    assert code == 0 and [o["id"] for o in json.loads(out)] == [1, 2]
    code, out, _ = etl_main(capsys, "api", "object", "2")
    assert code == 0 and "operatingMode" in out  # one record: field/value lines
    code, out, _ = etl_main(capsys, "api", "units", "1", "--json")
    assert code == 0 and json.loads(out)[0]["deviceconnect"]["device"]["id"] == 101
    code, out, _ = etl_main(capsys, "api", "params", "1", "--json")
    params = json.loads(out)
    assert code == 0 and {p["kind"] for p in params} == {"physical", "signal", "calculated"}
    code, out, _ = etl_main(capsys, "api", "status", "1001", "--json")
    assert code == 0 and json.loads(out)["statecolor"] in {"none", "normal", "warning", "error", "critical"}
    for which in ("zones", "classifiers", "room-types", "rooms"):
        code, out, _ = etl_main(capsys, "api", "refs", which, "--json")
        assert code == 0 and json.loads(out), which
    code, out, _ = etl_main(capsys, "api", "commands", "101")
    assert code == 0 and "reboot" in out and "set-interval" in out


@pytest.mark.parametrize(
    ("kind", "param_id", "columns"),
    [
        ("raw", "1001", {"ts", "value"}),
        ("average", "1001", {"ts", "value"}),
        ("candles", "1001", {"ts", "open", "high", "low", "close"}),
        ("raw", "1501", {"ts", "value"}),
        ("raw", "1003", {"ts", "value"}),
    ],
)
def test_series_command(env, capsys, kind, param_id, columns):
    code, out, _ = etl_main(
        capsys,
        "api",
        "series",
        param_id,
        "--from",
        "2026-11-01T00:00:00Z",
        "--to",
        "2026-11-01T06:00:00Z",
        "--kind",
        kind,
        "--json",
    )
    rows = json.loads(out)
    assert code == 0 and rows and set(rows[0]) == columns
    assert all("2026-11-01T00:00:00.000Z" <= r["ts"] <= "2026-11-01T06:00:00.000Z" for r in rows)
    if param_id == "1003":  # a signal parameter
        assert {r["value"] for r in rows} <= {0.0, 1.0}


def test_series_over_24h_is_a_usage_error(env, capsys):
    code, out, err = etl_main(
        capsys, "api", "series", "1001", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:01Z"
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "24 hours" in err


def test_actions_ask_first_and_are_recorded(monkeypatch, fresh_emulator, capsys):
    sign_in_env(monkeypatch, fresh_emulator)
    code, _, err = etl_main(
        capsys, "api", "run-command", "101", "1011", "mode=a b&c", stdin="n\n", monkeypatch=monkeypatch
    )
    assert code == 1 and "aborted" in err and fresh_emulator.commands() == []
    code, _, _ = etl_main(capsys, "api", "run-command", "101", "1011", "mode=a b&c", "--yes")
    assert code == 0 and [r["commandData"] for r in fresh_emulator.commands()] == ["mode=a b&c"]
    code, out, _ = etl_main(capsys, "api", "set-value", "1001", "77.5", "--yes", "--json")
    assert code == 0 and json.loads(out)["value"] == 77.5
    code, _, err = etl_main(
        capsys, "api", "set-value", "1003", "0.5", "--yes"
    )  # a signal parameter: 0 or 1 only
    assert code == 5 and "HTTP 400" in err


def test_no_connection_and_wrong_password(monkeypatch, emulator, capsys):
    for name in ("ETL_BASE_URL", "ETL_USERNAME", "ETL_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = etl_main(capsys, "api", "objects")
    assert code == 2 and "ETL_BASE_URL" in err
    monkeypatch.setenv("ETL_BASE_URL", emulator.base_url)
    monkeypatch.setenv("ETL_USERNAME", "demo")
    monkeypatch.setenv("ETL_PASSWORD", "s3cret-wrong")
    code, out, err = etl_main(capsys, "api", "objects")
    assert code == 3 and "s3cret-wrong" not in out + err and err.startswith("etl: error: sign-in refused")
