"""Checkpoints of a wide fleet: how long a year of them takes to load, and to load and plan the next day;
and a first load of a year for a wide fleet, planned and its slabs made one at a time (peak RSS).

    python benchmarks/state.py [--params 100000] [--days 365] [--repeat 3] [--first-load 40000] [--json PATH]

The state of tests/support/wide_state.py (every parameter x 3 series covered for `--days`, one day failed
in 1% of them, the log of a day of slabs on top), written once into a temporary folder; then, `--repeat`
times in this process, the store loaded and the next day planned over it. Printed: the best of the
repeats (others on the machine only ever add time): wall and CPU seconds. `--first-load N`: then, in a
child process, a year of N parameters with no checkpoint planned and every slab made and dropped in the
plan's order: the windows, the seconds and the peak RSS (and what of it is more than the imports').
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from etl.state import StateStore  # noqa: E402
from etl.storage.atomic import Storage  # noqa: E402
from tests.support.wide_state import DAYS, PARAMS, fleet, load_and_plan, write_state  # noqa: E402


def measure(params: int, days: int, repeat: int) -> dict[str, float | int]:
    """The best of `repeat` rounds: by wall for the load alone, by CPU for the load and plan (the work
    done, whatever else the machine runs)."""
    with tempfile.TemporaryDirectory() as folder:
        write_state(Path(folder), params, days)
        parameters = fleet(params)
        loads, rounds = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            StateStore(Storage(folder)).load()
            loads.append(time.perf_counter() - started)
            started, cpu = time.perf_counter(), time.process_time()
            planned = load_and_plan(Path(folder), parameters, days)
            rounds.append((time.process_time() - cpu, time.perf_counter() - started))
    cpu_seconds, seconds = min(rounds)
    return {
        "params": params,
        "days": days,
        "keys": len(planned.loaded),
        "windows": planned.windows,
        "load_seconds": round(min(loads), 3),
        "load_and_plan_seconds": round(seconds, 3),
        "load_and_plan_cpu_seconds": round(cpu_seconds, 3),
        "repeat": repeat,
    }


def first_load(params: int, days: int) -> dict[str, float | int]:
    """In this process: a year of `params` parameters planned from nothing, its slabs made one at a time."""
    import numpy as np

    from etl.model import Params, Series
    from etl.pipeline.plan import Fleet, Plan, PlanOptions, spans_for
    from etl.state import Coverage
    from etl.timeutil import DAY_MS
    from tests.support.wide_state import T0

    ids = np.arange(1, params + 1, dtype=np.int64)
    fleet = Params(ids, ids // 1000, np.zeros(params, np.int8))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    plan = Plan(
        Fleet(fleet, 4),
        Coverage(),
        PlanOptions(T0, T0 + days * DAY_MS),
        list(Series),
        spans_for(DAY_MS, 7 * DAY_MS),
    )
    planned = plan.windows
    made = sum(len(slab.windows) for slab in plan.slabs())
    return {
        "params": params,
        "days": days,
        "windows": made,
        "planned_windows": planned,
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_mb_over_imports": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before, 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", type=int, default=PARAMS)
    parser.add_argument("--days", type=int, default=DAYS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--first-load", type=int, metavar="PARAMS", help="also a first load of this many")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--first-load-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_load_child:
        print(json.dumps(first_load(args.first_load_child, args.days)))
        return
    row = measure(args.params, args.days, args.repeat)
    print(
        f"state of {row['keys']:,} (parameter, series) keys over {row['days']} days: loaded in "
        f"{row['load_seconds']:.2f} s; loaded and planned ({row['windows']:,} windows) in "
        f"{row['load_and_plan_seconds']:.2f} s ({row['load_and_plan_cpu_seconds']:.2f} s of CPU), "
        f"best of {row['repeat']}"
    )
    if args.first_load:
        child = [
            sys.executable,
            __file__,
            "--first-load-child",
            str(args.first_load),
            "--days",
            str(args.days),
        ]
        load = json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout)
        row["first_load"] = load
        print(
            f"a first load of {load['params']:,} parameters over {load['days']} days: {load['windows']:,} windows "
            f"planned and made slab by slab in {load['seconds']:.1f} s, peak RSS {load['peak_rss_mb']:.0f} MB "
            f"({load['peak_rss_mb_over_imports']:.0f} MB over the interpreter and its imports)"
        )
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
