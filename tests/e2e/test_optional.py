"""A missing or too old package of an extra (`scale`, `plot`, `lake`, `emulator`): one line naming it and its install
command, exit 2, through the CLI in a process where the package is hidden (None in sys.modules) or replaced
by an old version. That the requirements are the extras': tests/unit/support/test_optional_extras.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import environment
from tests.support.configs import config_dict, write_config
from tests.support.emulator import END, START

OFFLINE = "http://127.0.0.1:1/sem-restservices"  # commands that fail before they would connect


def etl_with(module: str, version: str | None, *args: str) -> subprocess.CompletedProcess:
    """`etl ARGS` in a process where `module` is missing (version None) or has this version."""
    if version is None:
        stub = f"sys.modules[{module!r}] = None"
    else:
        stub = f"sys.modules[{module!r}] = types.ModuleType({module!r}); sys.modules[{module!r}].__version__ = {version!r}"
    code = f"import sys, types; {stub}; from etl.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(),
    )


def config(folder: Path, out: Path | str, base_url: str = OFFLINE, **sections: Any) -> str:
    data = config_dict(base_url, out, **sections)
    data["source"]["password"] = "${ETL_PASSWORD}"
    return str(write_config(folder / "c.yaml", data))


def assert_one_line(result: subprocess.CompletedProcess, line: str) -> None:
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr == f"etl: error: {line}\n"


@pytest.mark.parametrize(
    ("version", "line"),
    [
        (None, "'etl plot' needs matplotlib: pip install 'etl[plot]'"),
        (
            "3.5.1",
            "'etl plot' needs matplotlib>=3.8,<4, found matplotlib 3.5.1: pip install --upgrade 'matplotlib>=3.8,<4'",
        ),
    ],
)
def test_plot(tmp_path, version, line):
    result = etl_with(
        "matplotlib",
        version,
        "plot",
        "-c",
        config(tmp_path, tmp_path / "out"),
        "1001",
        "--from",
        START,
        "--to",
        END,
        "-o",
        str(tmp_path / "p.png"),
    )
    assert_one_line(result, line)
    assert not (tmp_path / "p.png").exists()


def test_object_storage(tmp_path):
    result = etl_with("s3fs", None, "query", "-c", config(tmp_path, "s3://lake/monitoring"))
    assert_one_line(result, "s3://lake/monitoring needs s3fs: pip install 'etl[scale]'")


@pytest.mark.parametrize(
    ("version", "line"),
    [
        (None, "the dask executor needs distributed: pip install 'etl[scale]'"),
        (
            "2023.1.0",
            "the dask executor needs dask[distributed]>=2024.4, found distributed 2023.1.0: "
            "pip install --upgrade 'dask[distributed]>=2024.4'",
        ),
    ],
)
def test_the_dask_executor(emulator, tmp_path, version, line):
    result = etl_with(
        "distributed",
        version,
        "run",
        "-c",
        config(tmp_path, tmp_path / "out", emulator.base_url),
        "--scheduler",
        "tcp://127.0.0.1:1",
        "--no-progress",
    )
    assert_one_line(result, line)


@pytest.mark.parametrize(("fmt", "module"), [("delta", "deltalake"), ("iceberg", "pyiceberg")])
def test_a_lake_format(tmp_path, fmt, module):
    path = config(tmp_path, tmp_path / "out", sink={"format": fmt})
    result = etl_with(module, None, "run", "-c", path, "--no-progress")
    assert_one_line(result, f"sink.format {fmt} needs {module}: pip install 'etl[lake]'")


def test_the_emulator_server():
    result = etl_with("uvicorn", None, "emulator", "serve", "--port", "0")
    assert_one_line(result, "'etl emulator serve' needs uvicorn: pip install 'etl[emulator]'")


def test_lineage(emulator, tmp_path):
    """Asked by the config: one line before the run starts (asked by the environment alone: a warning,
    tests/unit/pipeline/test_lineage_config.py)."""
    path = config(tmp_path, tmp_path / "out", emulator.base_url, lineage=True, series=["raw"])
    result = etl_with("openlineage.client", None, "run", "-c", path, "--no-progress")
    assert_one_line(result, "lineage needs openlineage-python: pip install 'etl[lineage]'")
    assert not (tmp_path / "out" / "raw").exists()


def test_dagster():
    code = "import sys; sys.modules['dagster'] = None; import etl.dagster"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert (
        done.stderr.splitlines()[-1] == "ImportError: etl.dagster needs dagster: pip install 'etl[dagster]'"
    )


def test_telemetry(tmp_path):
    telemetry = {"otlp_endpoint": "http://127.0.0.1:1"}
    path = config(tmp_path, tmp_path / "out", telemetry=telemetry, series=["raw"])
    result = etl_with("opentelemetry.sdk", None, "run", "-c", path, "--no-progress")
    assert_one_line(result, "telemetry needs opentelemetry-sdk: pip install 'etl[otel]'")
