"""`make bench-fleet`: `etl run` over wide fleets, next to bare httpx replaying the same requests.

    python benchmarks/fleet.py [--sizes 800 8000 40000] [--latencies 0 0.01 0.05] [--latency-size 8000]
                               [--history 7 70] [--history-size 8000] [--quick] [--json PATH]

For each fleet size the emulator (its own process: `--objects N/8 --params-per-object 6
--calc-per-object 2`, sampling every 10 s to 15 min) serves a one-day run of every series with the
default config (dimension tables included). A first `etl run` warms the emulator and its request log
gives the requests etl made: all of them, discovery and dimension tables included, sign-in excepted.
The ceiling replays exactly those with bare httpx at the same concurrency (16), bodies read and thrown
away. Then the ceiling and `etl run` are measured, each in its own process: wall from sign-in to the
last write, CPU of the process, peak RSS (from the kernel when it exits).

Then, at one size, the same comparison with the emulator answering in 0, 10 and 50 ms; and the
history: the same fleet over 1 week and 10 weeks, peak RSS of each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
import yaml

from etl.timeutil import DAY_MS, iso, to_ms
from harness import HERE, PY, Emulator, environment, run_child, save

START = "2026-11-01T00:00:00Z"
PER_OBJECT = (6, 2)  # physical (the last a signal) and calculated parameters per object


@dataclass
class Run:
    seconds: float  # sign-in to the last write
    wall: float  # the whole process
    cpu_seconds: float
    peak_rss_mb: float
    requests: int
    points: int = 0
    files_per_partition: int = 0


def objects_for(parameters: int) -> int:
    return max(1, parameters // sum(PER_OBJECT))


class Fleet:
    """An emulator serving N parameters, and runs against it."""

    def __init__(self, workdir: Path, parameters: int, days: int) -> None:
        self.workdir = workdir / f"fleet-{parameters}"
        self.workdir.mkdir()
        self.log = self.workdir / "requests.jsonl"
        self.parameters = objects_for(parameters) * sum(PER_OBJECT)
        now = iso(to_ms(START) + (days + 1) * DAY_MS)
        self.emulator = Emulator(
            self.workdir,
            "emulator",
            [
                "--objects",
                str(objects_for(parameters)),
                "--params-per-object",
                str(PER_OBJECT[0]),
                "--calc-per-object",
                str(PER_OBJECT[1]),
                "--now",
                now,
                "--request-log",
                str(self.log),
            ],
        )

    def config(self, days: int) -> Path:
        path = self.workdir / f"etl-{days}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "source": {
                        "base_url": self.emulator.base_url,
                        "username": "demo",
                        "password": "${ETL_PASSWORD}",
                    },
                    "window": {"start": START, "end": iso(to_ms(START) + days * DAY_MS)},
                    "sink": {"path": str(self.workdir / "out")},
                }
            )
        )
        return path

    def etl(self, days: int = 1) -> Run:
        out = self.workdir / "out"
        shutil.rmtree(out, ignore_errors=True)
        summary, usage = run_child(
            [PY, "-m", "etl", "run", "-c", str(self.config(days)), "--json", "--no-progress"]
        )
        partitions = [p for p in (out / "raw").iterdir() if p.is_dir()]
        return Run(
            summary["seconds"],
            usage["wall"],
            usage["cpu_seconds"],
            usage["peak_rss_mb"],
            summary["requests"],
            summary["points"],
            max(len(list(p.glob("*.parquet"))) for p in partitions),
        )

    def requests_of_last_run(self) -> Path:
        """The spec peers.py's ceiling replays: every request of the log but the sign-in."""
        base = self.emulator.base_url.removeprefix(self.emulator.url)
        requests = []
        for line in self.log.read_bytes().splitlines():
            entry = orjson.loads(line)
            if entry["path"].endswith("/auth/login") or entry.get("status") != 200:
                continue
            requests.append(
                {
                    "method": entry["method"],
                    "path": entry["path"].removeprefix(base),
                    "query": entry.get("query") or {},
                }
            )
        spec = self.workdir / "requests.json"
        spec.write_text(
            json.dumps(
                {
                    "base_url": self.emulator.base_url,
                    "username": "demo",
                    "password": "demo",
                    "concurrency": 16,
                    "requests": requests,
                }
            )
        )
        return spec

    def ceiling(self, spec: Path) -> Run:
        line, usage = run_child(
            [
                PY,
                str(HERE / "peers.py"),
                "ceiling-uvloop",
                "--requests",
                str(spec),
                "--out",
                str(self.workdir / "ceiling"),
            ]
        )
        return Run(
            line["seconds"],
            usage["wall"],
            usage["cpu_seconds"],
            usage["peak_rss_mb"],
            len(json.loads(spec.read_text())["requests"]),
        )

    def warm(self, days: int = 1) -> Path:
        self.log.write_bytes(b"")
        self.etl(days)
        return self.requests_of_last_run()

    def latency(self, seconds: float) -> None:
        self.emulator.control.set_faults(latency=seconds)

    def stop(self) -> None:
        self.emulator.stop()


def compare(fleet: Fleet, spec: Path) -> dict:
    ceiling, etl = fleet.ceiling(spec), fleet.etl()
    return {
        "parameters": fleet.parameters,
        "ceiling": asdict(ceiling),
        "etl": asdict(etl),
        "share_of_ceiling": ceiling.seconds / etl.seconds,
        "cpu_ms_per_request": {
            "ceiling": 1000 * ceiling.cpu_seconds / ceiling.requests,
            "etl": 1000 * etl.cpu_seconds / etl.requests,
        },
        "cpu_ratio": (etl.cpu_seconds / etl.requests) / (ceiling.cpu_seconds / ceiling.requests),
    }


def row(label: str, r: dict) -> str:
    e, c = r["etl"], r["ceiling"]
    return (
        f"{label:>12} {e['points']:>12,} {e['requests']:>9,} {e['seconds']:>8.1f} {c['seconds']:>8.1f} "
        f"{r['share_of_ceiling']:>8.0%} {1000 * e['cpu_seconds'] / e['requests']:>9.2f} "
        f"{1000 * c['cpu_seconds'] / c['requests']:>9.2f} {r['cpu_ratio']:>6.2f}x {e['peak_rss_mb']:>8.0f} "
        f"{e['files_per_partition']:>6}"
    )


HEADER = (
    f"{'':>12} {'points':>12} {'requests':>9} {'etl s':>8} {'httpx s':>8} {'vs ceil':>8} "
    f"{'etl CPU':>9} {'httpx CPU':>9} {'ratio':>7} {'RSS MB':>8} {'files':>6}\n"
    f"{'':>12} {'':>12} {'':>9} {'':>8} {'':>8} {'':>8} {'ms/req':>9} {'ms/req':>9} {'':>7} {'peak':>8} "
    f"{'/part.':>6}"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[800, 8000, 40000], help="parameters")
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.0, 0.01, 0.05], help="seconds")
    parser.add_argument("--latency-size", type=int, default=8000, help="parameters of the latency comparison")
    parser.add_argument("--history", type=int, nargs=2, default=[7, 28], help="days, short and long")
    parser.add_argument("--history-size", type=int, default=2000, help="parameters of the history runs")
    parser.add_argument("--quick", action="store_true", help="tiny fleets: checks that the script works")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "fleet.json")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.latencies, args.latency_size, args.history, args.history_size = (
            [16, 48],
            [0.0, 0.01],
            16,
            [1, 2],
            16,
        )
    os.environ["ETL_PASSWORD"] = "demo"
    doc: dict = {"environment": environment(), "sizes": {}, "latencies": {}, "history": {}}
    env = doc["environment"]
    print(
        f"environment: Python {env['python']}, {env['cores']} cores, load average {env['load_average_start']}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="etl-fleet-"))
    try:
        print(
            "\none-day runs, every series, answers in 0 ms (CPU-bound: client and emulator share the cores)"
        )
        print(HEADER)
        for size in dict.fromkeys([*args.sizes, args.latency_size, args.history_size]):
            fleet = Fleet(workdir, size, max(args.history))
            try:
                if size in args.sizes:
                    r = doc["sizes"][str(fleet.parameters)] = compare(
                        fleet, fleet.warm()
                    )  # writes requests.json
                    print(row(f"{fleet.parameters:,} par.", r), flush=True)
                elif size == args.latency_size:
                    fleet.warm()
                if size == args.latency_size:
                    spec = fleet.workdir / "requests.json"  # the warm-up run's requests, made above
                    for latency in args.latencies:
                        fleet.latency(latency)
                        doc["latencies"][f"{latency * 1000:g}ms"] = compare(fleet, spec)
                    fleet.latency(0)
                if size == args.history_size:
                    for days in args.history:
                        doc["history"][str(days)] = asdict(fleet.etl(days))
            finally:
                fleet.stop()
        print(f"\n{args.latency_size:,} parameters, one day, the emulator answering in:")
        print(HEADER)
        for key, r in doc["latencies"].items():
            print(row(key, r))
        short, long = (doc["history"][str(d)] for d in args.history)
        doc["history"]["growth"] = long["peak_rss_mb"] / short["peak_rss_mb"] - 1
        print(
            f"\nhistory at {args.history_size:,} parameters: {args.history[0]} days {short['points']:,} points, "
            f"peak RSS {short['peak_rss_mb']:.0f} MB; {args.history[1]} days {long['points']:,} points, peak RSS "
            f"{long['peak_rss_mb']:.0f} MB ({doc['history']['growth']:+.1%})"
        )
        rss = [r["etl"]["peak_rss_mb"] for r in doc["sizes"].values()]
        doc["rss_growth"] = rss[-1] / rss[0] - 1
        print(
            f"peak RSS from the smallest to the widest fleet: {rss[0]:.0f} -> {rss[-1]:.0f} MB "
            f"({doc['rss_growth']:+.1%})"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    save(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
