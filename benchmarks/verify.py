"""`make bench-verify`: what a nightly `etl verify --sample 0.01` costs over a wide fleet.

    python benchmarks/verify.py [--parameters 8000] [--days 7] [--samples 0.01 0.1] [--latency 0.05]
                                [--quick] [--json PATH]

The emulator (its own process) serves the fleet of bench-fleet (objects of 6 physical and 2 calculated
parameters, sampling every 10 s to 15 min); `etl run` exports `--days` days of every series into Parquet
(not measured). Then, the emulator answering in `--latency` seconds, `etl verify --sample S --json` runs
in a process of its own for each sample: the requests it sent (its own count, and the emulator's log, sign-in
and listing included), the windows it compared of those the checkpoints claim, its seconds, and the
process's wall time, CPU and peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from fleet import Fleet

from harness import HERE, PY, environment, run_child, save

HEADER = (
    f"{'sample':>8} {'windows':>9} {'of':>9} {'requests':>9} {'log':>6} {'seconds':>8} {'wall s':>7} "
    f"{'CPU s':>6} {'RSS MB':>7} {'verdict':>8}"
)


def verify(fleet: Fleet, config: Path, sample: float) -> dict:
    fleet.log.write_bytes(b"")  # the emulator appends: what this verify sent
    result, usage = run_child(
        [PY, "-m", "etl", "verify", "-c", str(config), "--sample", str(sample), "--seed", "1", "--json"],
        check=False,
    )
    logged = sum(1 for line in fleet.log.read_bytes().splitlines() if line.strip())
    return {
        "sample": sample,
        "candidates": result["candidates"],
        "verified": result["verified"],
        "requests": result["requests"],
        "requests_logged": logged,
        "seconds": result["seconds"],
        "status": result["status"],
        **usage,
    }


def row(r: dict) -> str:
    return (
        f"{r['sample']:>8g} {r['verified']:>9,} {r['candidates']:>9,} {r['requests']:>9,} "
        f"{r['requests_logged']:>6,} {r['seconds']:>8.1f} {r['wall']:>7.1f} {r['cpu_seconds']:>6.1f} "
        f"{r['peak_rss_mb']:>7.0f} {r['status']:>8}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", type=int, default=8000)
    parser.add_argument("--days", type=int, default=7, help="the history exported, then verified")
    parser.add_argument("--samples", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the emulator takes to answer")
    parser.add_argument("--quick", action="store_true", help="a tiny fleet: checks that the script works")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "verify.json")
    args = parser.parse_args()
    if args.quick:
        args.parameters, args.days = 48, 2
    os.environ["ETL_PASSWORD"] = "demo"
    doc: dict = {"environment": environment(), "parameters": 0, "days": args.days, "runs": []}
    env = doc["environment"]
    print(
        f"environment: Python {env['python']}, {env['cores']} cores, load average {env['load_average_start']}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="etl-verify-"))
    try:
        fleet = Fleet(workdir, args.parameters, args.days)
        try:
            doc["parameters"] = fleet.parameters
            export = fleet.etl(args.days)
            print(f"exported {fleet.parameters:,} parameters x {args.days} days: {export.points:,} points")
            fleet.latency(args.latency)
            print(f"\netl verify, answers in {args.latency * 1000:g} ms")
            print(HEADER)
            for sample in args.samples:
                r = verify(fleet, fleet.config(args.days), sample)
                doc["runs"].append(r)
                print(row(r), flush=True)
        finally:
            fleet.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    save(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
