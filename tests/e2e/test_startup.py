"""What an `etl run` process loads: not pandas, which pyarrow would import only to ask whether a value
is a pandas object (etl/cli/runs.py); etl's own parser of odd stamps still gets it. How it loads: with
OpenBLAS on one thread, Arrow on the system allocator and the collector frozen over the loaded modules
(etl/support/startup.py), in etl's own process only."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli import environment
from tests.support.configs import config_dict, write_config

WATCH = """
import atexit, gc, os, runpy, sys
heavy = ("pandas", "duckdb", "deltalake", "pyiceberg", "distributed", "matplotlib", "pyarrow.dataset",
         "openlineage", "dagster", "opentelemetry.sdk")
atexit.register(lambda: print("LOADED", *[m for m in heavy if m in sys.modules], file=sys.stderr))
atexit.register(lambda: print("GC", gc.isenabled(), gc.get_freeze_count() > 10_000,
                              os.environ.get("OPENBLAS_NUM_THREADS"), file=sys.stderr))
atexit.register(lambda: print("ARROW", os.environ.get("ARROW_DEFAULT_MEMORY_POOL"),
                              sys.modules["pyarrow"].default_memory_pool().backend_name, file=sys.stderr))
sys.argv = ["etl", *sys.argv[1:]]
runpy.run_module("etl", run_name="__main__")
"""


def test_a_parquet_run_loads_none_of_the_heavy_optional_modules(emulator, tmp_path):
    config = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    done = subprocess.run(
        [sys.executable, "-c", WATCH, "run", "-c", str(config), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = next(line for line in done.stderr.splitlines() if line.startswith("LOADED"))
    assert loaded == "LOADED", loaded
    # Collected after loading (the run's objects), the modules' objects frozen, BLAS on one thread.
    assert "GC True True 1" in done.stderr.splitlines()
    assert "ARROW system system" in done.stderr.splitlines()  # Arrow's C++ pool and pyarrow's


def test_a_program_that_runs_etl_keeps_its_collector_blas_threads_and_allocators(emulator, tmp_path):
    config = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, tmp_path / "out"))
    code = f"""
import gc, os, pyarrow as pa, etl
from etl.cli import main
pool = pa.default_memory_pool().backend_name
try:
    main(["run", "-c", {str(config)!r}, "--no-progress"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("GC", gc.isenabled(), gc.get_freeze_count(), os.environ.get("OPENBLAS_NUM_THREADS"))
print("ARROW", os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), pool, pa.default_memory_pool().backend_name)
"""
    env = environment(None, {name: None for name in ("ARROW_DEFAULT_MEMORY_POOL", "OPENBLAS_NUM_THREADS")})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    collector, arrow = done.stdout.splitlines()[-2:]
    assert collector == "GC True 0 None"
    _, variable, before, after = arrow.split()
    assert (variable, after) == ("None", before) and before != "system"  # pyarrow's own pool, kept


def test_odd_stamps_are_parsed_while_pandas_is_kept_from_pyarrow():
    code = """
import numpy as np, pyarrow as pa, sys
from etl.support.optional import pyarrow_looks_for_pandas
from etl.timeutil import parse_iso_ms
pyarrow_looks_for_pandas(find=False)
pa.array(np.zeros(3)).to_numpy()
pa.array([1, None]).to_pylist()
pa.schema([("ts", pa.timestamp("ms", tz="UTC"))]).empty_table()
assert "pandas" not in sys.modules
print(parse_iso_ms(["2026-11-01T00:00:00+03:00"])[0])
assert "pandas" in sys.modules and pa.array([1]).to_pandas().tolist() == [1]
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(1793480400000)]
