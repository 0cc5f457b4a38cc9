"""Relative paths in a config file are read from its folder (etl.config.load_config): the CLI started from
any working directory writes to the same output; an output an older etl wrote relative to the working
directory is named, not started again beside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from etl.config import load_config, parse_config
from etl.ops.init import placed
from tests.support.cli import etl
from tests.support.configs import config_dict, write_config


def _config(emulator, folder: Path, sink: str, **sections) -> Path:
    data = config_dict(
        emulator.base_url, sink, series=["raw"], window={"end": "2026-11-02T00:00:00Z"}, **sections
    )
    data["source"]["password"] = "${ETL_PASSWORD}"
    folder.mkdir(parents=True, exist_ok=True)
    return write_config(folder / "etl.yaml", data)


def test_a_config_run_from_another_working_directory_writes_to_the_same_output(emulator, tmp_path):
    config = _config(emulator, tmp_path / "project", "out", state={"path": "state"})
    elsewhere = [tmp_path / "cron", tmp_path / "home"]
    for cwd in elsewhere:
        cwd.mkdir()
    first = etl("run", "-c", str(config), "--json", "--no-progress", cwd=elsewhere[0])
    assert first.returncode == 0, first.stderr
    out = tmp_path / "project" / "out"
    assert (
        json.loads(first.stdout)["output"] == str(out) and json.loads(first.stdout)["series"]["raw"]["points"]
    )
    assert (out / "raw").is_dir() and (tmp_path / "project" / "state" / "127.0.0.1").is_dir()
    assert not any(any(p.iterdir()) for p in elsewhere)

    plan = etl("plan", "-c", os.path.relpath(config, elsewhere[1]), cwd=elsewhere[1])
    assert plan.returncode == 0 and f"output      {out}" in plan.stdout, plan.stdout + plan.stderr
    assert "raw             0 parameters" in plan.stdout  # the checkpoints were found: nothing to fetch
    again = etl("run", "-c", str(config), "--no-progress", cwd=elsewhere[1])
    assert again.returncode == 0 and "nothing new" in again.stdout and f"output      {out}" in again.stdout
    assert not any(any(p.iterdir()) for p in elsewhere)


def test_an_output_written_relative_to_the_working_directory_is_named(emulator, tmp_path):
    """An older etl read `sink.path: data` from the working directory: the run stops (exit 2, one line)
    rather than start a second output beside the config, and writes nothing."""
    config = _config(emulator, tmp_path / "project", "data")
    cwd = tmp_path / "cron"
    (cwd / "data" / "raw").mkdir(parents=True)
    result = etl("run", "-c", str(config), "--no-progress", cwd=cwd)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    here, there = tmp_path / "project" / "data", cwd / "data"
    assert line == (
        f"etl: error: config error: sink.path: 'data' is read from the config file's folder: {here} holds "
        f"nothing, but {there} (from the working directory) does: move it to {here}, or set sink.path: {there}"
    )
    assert not here.exists() and [p.name for p in (cwd / "data").iterdir()] == ["raw"]


def test_paths_from_the_file_and_from_python(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    data = config_dict("http://h/sem-restservices", "out", state={"path": "../state"})
    data["source"].update(password=None, password_file="secret")
    config = load_config(write_config((folder.mkdir() or folder) / "c.yaml", data))
    assert config.sink.path == str(folder / "out") and config.state.path == str(tmp_path / "state")
    assert config.source.password_file == folder / "secret"
    assert config.state_path == f"{tmp_path / 'state'}/h"
    monkeypatch.chdir(tmp_path)
    built = parse_config(data)  # a Config made in Python, without a file: the working directory's
    assert (built.sink.path, built.state.path, built.source.password_file) == (
        "out",
        "../state",
        Path("secret"),
    )
    for url in ("s3://bucket/out", "/abs/out"):
        assert load_config(write_config(folder / "c.yaml", {**data, "sink": {"path": url}})).sink.path == url


def test_init_writes_a_relative_sink_path_as_the_config_reads_it(emulator, tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    argv = ["init", "--base-url", emulator.base_url, "--username", "demo", "--sink-path", "data/out"]
    result = etl(*argv, "-o", "conf/etl.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((tmp_path / "conf" / "etl.yaml").read_text())["sink"]["path"] == "../data/out"
    assert load_config(tmp_path / "conf" / "etl.yaml", offline=True).sink.path == str(
        tmp_path / "data" / "out"
    )
    printed = etl(*argv, cwd=tmp_path)  # no file to be relative to: the full path
    assert yaml.safe_load(printed.stdout)["sink"]["path"] == str(tmp_path / "data" / "out")
    monkeypatch.chdir(tmp_path)
    assert placed("s3://b/x", str(tmp_path)) == "s3://b/x" and placed("/x", None) == "/x"
