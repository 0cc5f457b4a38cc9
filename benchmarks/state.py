"""Checkpoints of a wide fleet: how long a year of them takes to load, and to load and plan the next day.

    python benchmarks/state.py [--params 100000] [--days 365] [--repeat 3] [--json PATH]

The state of tests/support/wide_state.py (every parameter x 3 series covered for `--days`, one day failed
in 1% of them, the log of a day of slabs on top), written once into a temporary folder; then, `--repeat`
times in this process, the store loaded and the next day planned over it. Printed: the best of the
repeats (others on the machine only ever add time): wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", type=int, default=PARAMS)
    parser.add_argument("--days", type=int, default=DAYS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    row = measure(args.params, args.days, args.repeat)
    print(
        f"state of {row['keys']:,} (parameter, series) keys over {row['days']} days: loaded in "
        f"{row['load_seconds']:.2f} s; loaded and planned ({row['windows']:,} windows) in "
        f"{row['load_and_plan_seconds']:.2f} s ({row['load_and_plan_cpu_seconds']:.2f} s of CPU), "
        f"best of {row['repeat']}"
    )
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
