"""Local-path speed of the code on PYTHONPATH: one run, and the CPU of one slab's partition rewrite.

Compare two commits (e.g. before and after a change to the pipeline or the sink):

    git archive COMMIT | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/scale_parity.py
    PYTHONPATH=.         .venv/bin/python benchmarks/scale_parity.py
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time

import numpy as np
import pyarrow as pa

from etl.config import parse_config
from etl.emulator.server import EmulatorConfig, run_emulator
from etl.pipeline import Runner, RunOptions
from etl.sinks import DatasetWriter, Replaced, file_format
from etl.storage import Storage
from etl.timeutil import DAY_MS, to_ms
from etl.transform import SCHEMAS

T0 = to_ms("2026-11-01T00:00:00Z")


def run_seconds(repeat: int = 4) -> tuple[float, float, int]:
    """12 objects x 8 parameters, 7 days, every series, emulator in this process: best and median wall."""
    emulator = EmulatorConfig(seed=7, objects=12, params_per_object=6, calc_per_object=2,
                              now_ms=to_ms("2026-11-20T00:00:00Z"))
    times, points = [], 0
    with run_emulator(emulator) as running:
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as out:
                config = parse_config({
                    "source": {"base_url": running.base_url, "username": "demo", "password": "demo"},
                    "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z"},
                    "sink": {"path": out},
                })
                started = time.perf_counter()
                points = asyncio.run(Runner(config, RunOptions(progress=False)).run()).as_dict()["points"]
                times.append(time.perf_counter() - started)
    return min(times), sorted(times)[len(times) // 2], points


def write_cpu_ms(repeat: int = 5, writes: int = 20) -> float:
    """CPU (all threads) of rewriting one day's partition of 40 parameters x 8640 points."""
    ids = np.repeat(np.arange(1001, 1041), 8640)
    n = len(ids)
    table = pa.table({
        "object_id": ids // 1000, "param_id": ids, "kind": pa.array(["physical"] * n),
        "ts": pa.array(np.tile(T0 + np.arange(8640) * 10_000, 40), SCHEMAS["raw"].field("ts").type),
        "value": np.random.default_rng(1).random(n),
    }, schema=SCHEMAS["raw"])
    ranges = [Replaced(p, p // 1000, T0, T0 + DAY_MS) for p in range(1001, 1041)]
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            writer = DatasetWriter(Storage(out), "raw", file_format("parquet"), ["date"])
            started = time.process_time()
            for _ in range(writes):
                writer.write(table, ranges)
            best = min(best, (time.process_time() - started) / writes * 1000)
    return best


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    best, median, points = run_seconds()
    print(f"run: {points:,} points, best {best:.2f} s, median {median:.2f} s")
    print(f"slab write: {write_cpu_ms():.1f} ms CPU per partition rewrite (345,600 rows)")
