"""Before and after: `etl run` from two or more builds, alternating, against one emulator.

    python benchmarks/ab.py --commits d44cd22 HEAD [--workload bench|hour] [--format parquet|delta]
        [--latency 0.05] [--repeat 7]
    python benchmarks/ab.py --trees OLD=/path/to/checkout NEW=. ...

Each commit is checked out as a detached git worktree in a temp folder (removed afterwards) and its
bytecode compiled; each build runs in its own process with `PYTHONPATH` set to its tree, started from a
folder outside every tree (`python -m etl` puts the current folder first on the import path, which would
make every build the one the command was started in). The builds share the venv's dependencies.

Workloads:
- `bench`: `make bench`'s fleet (50 parameters x 7 days or `--days`, every series, 16 in flight), answers after
  `--latency` seconds; the run's seconds (sign-in to the last write), its process wall, CPU, peak RSS.
- `hour`: the start-up of an hourly run (24 parameters, as `make bench-schedule`; a first run over a day,
  then the measured run one hour further, restored from a copy of the first run's output each time).

`--format`: the sink's (Iceberg is left out: its SQLite catalog names the first run's folder, so a copy
of the output would commit to the original).

Rounds alternate the builds; the first round warms the emulator and is left out. CPU seconds on a shared
VM carry the host's noise (docs/performance.md, "Measuring on this machine"): medians and minimums.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from etl.timeutil import DAY_MS, iso, to_ms
from harness import HERE, PY, Emulator

ROOT = HERE.parent
FIELDS = ("seconds", "wall", "cpu_seconds", "peak_rss_mb", "requests")
START, DAY_END, HOUR_END = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", "2026-11-02T01:00:00Z"
NOW = "2026-12-01T00:00:00Z"  # the emulator's clock: a bench history of at most 30 days


def worktree(commit: str, into: Path) -> Path:
    path = into / commit.replace("/", "_")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), commit],
        check=True,
        capture_output=True,
    )
    subprocess.run([PY, "-m", "compileall", "-q", str(path / "etl")], check=True)
    return path


def config(path: Path, emulator: Emulator, out: Path, start: str, end: str, fmt: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {"base_url": emulator.base_url, "username": "demo", "password": "${ETL_PASSWORD}"},
                "window": {"start": start, "end": end},
                "sink": {"path": str(out), "format": fmt},
            }
        )
    )
    return path


def etl_run(tree: Path, cfg: Path, work: Path) -> dict:
    usage = work / "usage.json"
    done = subprocess.run(
        [
            PY,
            str(HERE / "measure.py"),
            str(usage),
            PY,
            "-m",
            "etl",
            "run",
            "-c",
            str(cfg),
            "--json",
            "--no-progress",
        ],
        env={**os.environ, "PYTHONPATH": str(tree), "ETL_PASSWORD": "demo"},
        cwd=work,  # outside every tree
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"{tree}: etl run exited {done.returncode}: {done.stderr.strip()[-800:]}")
    summary, measured = json.loads(done.stdout), json.loads(usage.read_text())
    return {
        "seconds": summary["seconds"],
        "requests": summary["requests"],
        **{k: measured[k] for k in ("wall", "cpu_seconds", "peak_rss_mb")},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    builds = parser.add_mutually_exclusive_group(required=True)
    builds.add_argument("--commits", nargs="+", metavar="REV", help="git revisions of this repository")
    builds.add_argument("--trees", nargs="+", metavar="NAME=PATH", help="source trees (checkouts)")
    parser.add_argument("--workload", choices=["bench", "hour"], default="bench")
    parser.add_argument(
        "--fleet",
        type=int,
        nargs=3,
        metavar=("OBJECTS", "PER_OBJECT", "CALCULATED"),
        help="the emulator's fleet: objects, parameters and calculated ones per object "
        "(default bench 5 8 2, hour 3 6 2)",
    )
    parser.add_argument("--days", type=int, default=7, help="the bench workload's history")
    parser.add_argument("--format", choices=["parquet", "csv", "delta"], default="parquet")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before each answer (bench)")
    parser.add_argument("--repeat", type=int, default=7, help="measured rounds (after one warm-up round)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if not 1 <= args.days <= (to_ms(NOW) - to_ms(START)) // DAY_MS:
        parser.error(f"--days: 1 to {(to_ms(NOW) - to_ms(START)) // DAY_MS} (the emulator's clock is {NOW})")

    work = Path(tempfile.mkdtemp(prefix="etl-ab-"))
    made: list[Path] = []
    try:
        if args.commits:
            trees = {rev: worktree(rev, work) for rev in args.commits}
            made = list(trees.values())
        else:
            trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.trees)}
        bench = args.workload == "bench"
        fleet = args.fleet or ((5, 8, 2) if bench else (3, 6, 2))
        flags = [
            "--objects",
            str(fleet[0]),
            "--params-per-object",
            str(fleet[1]),
            "--calc-per-object",
            str(fleet[2]),
        ]
        emulator = Emulator(work, "emulator", [*flags, "--period-range", "10:60", "--now", NOW])
        try:
            emulator.control.set_faults(latency=args.latency if bench else 0.0)
            rounds: dict[str, list[dict]] = {name: [] for name in trees}
            for i in range(args.repeat + 1):
                for name, tree in trees.items():
                    out = work / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    if bench:
                        cfg = config(
                            work / "c.yaml",
                            emulator,
                            out,
                            START,
                            iso(to_ms(START) + args.days * DAY_MS),
                            args.format,
                        )
                    else:
                        first = work / f"first-{list(trees).index(name)}"
                        if not first.exists():
                            etl_run(
                                tree,
                                config(
                                    work / "c.yaml",
                                    emulator,
                                    first,
                                    START,
                                    DAY_END,
                                    args.format,
                                ),
                                work,
                            )
                        shutil.copytree(first, out)  # its state and files name no folder of their own
                        cfg = config(work / "c.yaml", emulator, out, START, HOUR_END, args.format)
                    row = etl_run(tree, cfg, work)
                    shutil.rmtree(out, ignore_errors=True)
                    print(
                        f"round {i} {name:>12}: " + "  ".join(f"{k} {row[k]:.3f}" for k in FIELDS), flush=True
                    )
                    if i:
                        rounds[name].append(row)
        finally:
            emulator.stop()
        print(
            f"load average {tuple(round(x, 2) for x in os.getloadavg())}; {args.repeat} rounds, {args.workload}"
            + (f", answers after {args.latency:g} s" if bench else "")
        )
        print(f"{'build':>12} " + " ".join(f"{k + ' median':>18} {'min':>7}" for k in FIELDS))
        result = {}
        for name, rows in rounds.items():
            result[name] = {
                k: {"median": statistics.median(r[k] for r in rows), "min": min(r[k] for r in rows)}
                for k in FIELDS
            }
            print(
                f"{name:>12} "
                + " ".join(
                    f"{result[name][k]['median']:>18.3f} {result[name][k]['min']:>7.3f}" for k in FIELDS
                )
            )
        if args.json:
            args.json.write_text(
                json.dumps({"workload": args.workload, "latency": args.latency, "builds": result}, indent=1)
            )
        return 0
    finally:
        for path in made:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True
            )
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
