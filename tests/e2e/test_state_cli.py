"""Backfill with --from/--to and `etl state show|reset`, through the CLI entry point."""

from __future__ import annotations

import json

import pytest

from etl.cli import main
from etl.timeutil import HOUR_MS, to_ms
from tests.support.checks import assert_exact
from tests.support.cli import etl_main
from tests.support.configs import config_dict, write_config
from tests.support.emulator import END, START, series_requests


def high_waters(capsys, path) -> dict[tuple[int, str], str]:
    code, out, _ = etl_main(capsys, "state", "show", "-c", str(path), "--json")
    assert code == 0
    return {(r["param_id"], r["series"]): r["high_water"] for r in json.loads(out)}


def test_backfill_keeps_high_water_marks_and_reset_refetches_once(fresh_emulator, tmp_path, capsys):
    later = config_dict(fresh_emulator.base_url, tmp_path / "out", window={"start": "2026-11-02T00:00:00Z"})
    path = write_config(tmp_path / "c.yaml", later)
    assert etl_main(capsys, "run", "-c", str(path))[0] == 0
    marks = high_waters(capsys, path)
    assert set(marks.values()) == {"2026-11-03T00:00:00.000Z"}

    code, _, _ = etl_main(capsys, "run", "-c", str(path), "--from", START, "--to", "2026-11-02T00:00:00Z")
    assert code == 0 and high_waters(capsys, path) == marks  # an older backfill never moves a mark back
    assert_exact(tmp_path / "out", START, END)

    fresh_emulator.clear_requests()
    code, out, _ = etl_main(
        capsys, "state", "reset", "-c", str(path), "--param", "1001", "--series", "raw", "--yes"
    )
    assert code == 0 and "removed 1 checkpoint(s)" in out
    assert (1001, "raw") not in high_waters(capsys, path)
    assert etl_main(capsys, "run", "-c", str(path))[0] == 0
    paths = [r["path"] for r in series_requests(fresh_emulator)]
    assert paths and all(
        p.startswith("/sem-restservices/db/measure/1001/") for p in paths
    )  # only the forgotten series
    assert_exact(tmp_path / "out", START, END)

    # --from forgets only what lies after a moment (the repair of checkpoints past the server's clock).
    code, out, _ = etl_main(
        capsys, "state", "reset", "-c", str(path), "--from", "2026-11-02T12:00:00Z", "--yes"
    )
    assert code == 0 and f"removed {len(marks)} checkpoint(s)" in out
    assert set(high_waters(capsys, path).values()) == {"2026-11-02T12:00:00.000Z"}
    fresh_emulator.clear_requests()
    assert etl_main(capsys, "run", "-c", str(path))[0] == 0
    # (Once per route a wider span may be asked, to rule out a silent cap: see test_pipeline.)
    starts = [
        int(r["path"].split("/")[-2])
        for r in series_requests(fresh_emulator)
        if r["interval_ms"] <= HOUR_MS * 13
    ]
    assert starts and min(starts) >= to_ms("2026-11-02T11:00:00Z")  # the overlap, and nothing earlier
    assert_exact(tmp_path / "out", START, END)


def test_offline_commands_need_no_credentials(emulator, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ETL_UNSET_PASSWORD", raising=False)
    data = config_dict(emulator.base_url, tmp_path / "out")
    data["source"]["password"] = "${ETL_UNSET_PASSWORD}"
    path = write_config(tmp_path / "c.yaml", data)
    assert etl_main(capsys, "state", "show", "-c", str(path))[:2] == (0, "(nothing)\n")
    code, _, error = etl_main(capsys, "query", "-c", str(path))  # no output yet, which is what it says
    assert code == 2 and "no output yet in" in error and "ETL_UNSET_PASSWORD" not in error, error
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "-c", str(path)])
    assert exit_info.value.code == 2
    assert "source.password: environment variable ETL_UNSET_PASSWORD is not set" in capsys.readouterr().err
