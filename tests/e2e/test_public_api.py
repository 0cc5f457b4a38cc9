"""The public Python API: what `import etl` loads, and a notebook's session against the emulator. The names
it exports and a failed run's error, without a server: tests/unit/test_public_api_contract.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pandas as pd

import etl
from tests.support.cli import environment
from tests.support.configs import config_dict, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import expected_table


def test_importing_etl_loads_neither_the_pipeline_nor_pandas():
    """`import etl` is cheap: the pipeline, pandas and DuckDB load when a function needs them, the
    orchestrators' and lineage's libraries when a config or an import asks for them."""
    heavy = (
        "pandas",
        "duckdb",
        "etl.pipeline",
        "httpx",
        "openlineage",
        "dagster",
        "etl.dagster",
        "opentelemetry",
    )
    code = f"import etl, sys; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_notebook_runs_then_reads_named_rows_with_utc_stamps(emulator, tmp_path):
    config = write_config(tmp_path / "etl.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    summary = etl.run(config)
    assert summary.status == "ok" and summary.series["raw"].points > 0

    frame = etl.read(config, "raw", named=True)
    want = expected_table(emulator_config(), "raw", etl.timeutil.to_ms(START), etl.timeutil.to_ms(END))
    assert len(frame) == want.num_rows
    assert list(frame.columns) == [
        "object_name", "param_name", "unit", "source", "object_id", "param_id", "kind", "ts", "value"
    ]  # fmt: skip
    assert str(frame["ts"].dtype).startswith("datetime64") and str(frame["ts"].dt.tz) == "UTC"
    assert frame["param_id"].dtype == "int64" and frame["value"].dtype == "float64"
    assert frame["object_name"].notna().all() and frame["param_name"].notna().all()
    got = frame.sort_values(["param_id", "ts"])[["param_id", "value"]].reset_index(drop=True)
    wanted = want.to_pandas().sort_values(["param_id", "ts"])[["param_id", "value"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, wanted, check_dtype=False)

    # A window and a parameter: half-open [start, end) on `ts`.
    one = int(want.column("param_id")[0].as_py())
    part = etl.read(config, "raw", params=[one], start="2026-11-01T06:00:00Z", end="2026-11-01T07:00:00Z")
    assert set(part["param_id"]) == {one} and len(part) > 0
    assert part["ts"].min() >= pd.Timestamp("2026-11-01T06:00:00Z")
    assert part["ts"].max() < pd.Timestamp("2026-11-01T07:00:00Z")
    assert etl.connect(config).sql("select count(*) from raw").fetchall() == [(want.num_rows,)]


# A notebook's settings that only etl's own command may change (tests/e2e/test_startup.py): its environment
# (ARROW_DEFAULT_MEMORY_POOL...), its warnings filters, signal handlers, collector and pyarrow's memory pool. Taken once it has imported
# what it uses with etl (numpy adds warnings filters of its own as it loads).
SETTINGS = """
import gc, os, signal, sys, warnings
import duckdb, numpy, pandas, pyarrow
def settings():
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    return dict(os.environ), list(warnings.filters), handlers, gc.isenabled(), pyarrow.default_memory_pool().backend_name
before = settings()
"""


def program(code: str) -> list[str]:
    """The lines a program prints that runs SETTINGS, then `code`, without etl's own settings in its
    environment."""
    env = environment(None, {name: None for name in ("ARROW_DEFAULT_MEMORY_POOL", "OPENBLAS_NUM_THREADS")})
    done = subprocess.run([sys.executable, "-c", SETTINGS + code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_reading_an_output_loads_no_http_client(emulator, tmp_path):
    """`etl.read` and `etl.connect` open the output alone: neither the platform's client (httpx) nor the
    writers load in a notebook that only reads; and `import etl` and reading change none of its settings."""
    config = write_config(tmp_path / "etl.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    points = etl.run(config).series["raw"].points
    out = program(
        "import etl\n"
        "unchanged = settings() == before\n"
        f"rows = len(etl.read({str(config)!r}, 'raw', named=True))\n"
        f"count = etl.connect({str(config)!r}).sql('select count(*) from raw').fetchall()[0][0]\n"
        "loaded = sorted(m for m in ('httpx', 'etl.client', 'etl.quality.writer') if m in sys.modules)\n"
        "print(rows, count, unchanged, settings() == before, loaded)\n"
    )
    assert out == [f"{points} {points} True True []"]


def test_a_run_leaves_the_programs_settings_alone_unless_asked(emulator, tmp_path):
    """Iceberg's writer included (pyiceberg's dependencies add warnings filters of their own as they load);
    `tune_memory=True` gives pyarrow the pool `etl run` has."""
    data = config_dict(emulator.base_url, tmp_path / "out", series=["raw"], sink={"format": "iceberg"})
    config = str(write_config(tmp_path / "etl.yaml", data))
    out = program(
        "import pyiceberg.catalog\n"
        "before = settings()\n"
        "import etl\n"
        f"assert etl.run({config!r}).status == 'ok'\n"
        "print(settings() == before, before[-1])\n"
        f"etl.run({config!r}, tune_memory=True)\n"
        "print(pyarrow.default_memory_pool().backend_name)\n"
    )
    assert out[0].startswith("True ") and out[0] != "True system" and out[1:] == ["system"], out


def test_the_api_works_inside_a_running_event_loop(emulator, tmp_path):
    """Jupyter runs its own event loop: neither etl.run nor the sync client may call asyncio.run on it."""
    config = write_config(tmp_path / "etl.yaml", config_dict(emulator.base_url, tmp_path / "out"))

    async def cell():
        with etl.SyncMonitoringClient(emulator.base_url, "demo", "demo") as client:
            objects = [o.id for o in client.objects()]
        return objects, etl.run(config).status

    assert asyncio.run(cell()) == ([1, 2], "ok")
