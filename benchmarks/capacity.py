"""`make bench-capacity`: etl's default (`extract.concurrency: auto`) beside a fixed 16 (the default before
it) against servers of limited capacity, the table of issue 42.

    python benchmarks/capacity.py [--quick] [--scenarios small large ...] [--contenders auto]
                                  [--workers 3] [--threads 8] [--json PATH]

One process's figures of another checkout (an A/B): `PYTHONPATH=../old python benchmarks/capacity.py
--scenarios small large --contenders auto` runs that checkout's etl.

The emulator (its own process) plays a platform of C workers, each busy T = 200 ms a request, with a
queue (`--capacity`, `--service-time`, `--queue-max`; docs/emulator.md); its request log tells each
request's time in the server (`server_ms`: waiting for a worker and served), what the platform's other
users see. Scenarios (fleets of N parameters x D days, every series, the default config but the
concurrency; against a limited capacity the parameters are sampled every 5 to 15 minutes, so that the
emulator's own CPU is never what limits it):

- **small**: C = 4, 48 parameters x 7 days; **large**: C = 32, 192 x 7;
- **halving**: C = 32, then 16 from `--halve-at` seconds into the run, 192 x 14: the figures are taken
  from 10 s after the change to the end;
- **shedding**: C = 4 answering 503 past 8 requests waiting, 48 x 7;
- **unlimited**: no bound, every answer after 50 ms (`--latency`), 48 x 7: the latency bound N x L / 16;
- **wide**: the same at 8,000 parameters x 1 day: peak RSS;
- **threaded-small**, **threaded-large**: the standard library's ThreadingHTTPServer with a pool of C
  workers each busy T (servers/threaded.py), replaying the answers of the emulator recorded for those
  fleets (servers/record.py);
- **cluster-small**, **cluster-large**: the small and large fleets and servers, `auto`, run on a Dask
  cluster (a scheduler and 1, 3 and 6 worker processes of 2 threads each, `--threads`, on loopback);
- **shards-small**, **shards-large**: the same, `auto`, as 4 `--shard I/4` runs started together.

Throughput is the requests served per second from the first series request to the last answer, over
C / T; etl's run summary gives its limit's figures (concurrency, latency baseline and p95, refusals).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from foreign import PER_OBJECT, START, objects_for, start_threaded, write_config
from servers.record import record

from etl.timeutil import DAY_MS, iso, to_ms
from harness import HERE, PY, Emulator, environment, free_port, run_child, save

SERVICE = 0.2
CONTENDERS = {"auto": "auto", "fixed 16": 16}
CLUSTERS = (1, 3, 6)  # workers of the cluster scenarios
THREADS = 2  # each worker's, unless --threads


@dataclass(frozen=True)
class Scenario:
    name: str
    params: int
    days: int
    capacity: int | None = None
    queue_max: int | None = None
    latency: float = 0.0
    halve: bool = False
    foreign: bool = False  # the threaded server replays the emulator's answers
    workers: tuple[int, ...] = ()  # a Dask cluster of each of these many workers (2 threads each)
    shards: int = 0  # this many `--shard I/N` runs started together


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("small", 48, 7, capacity=4),
        Scenario("large", 192, 7, capacity=32),
        Scenario("halving", 192, 14, capacity=32, halve=True),
        Scenario("shedding", 48, 7, capacity=4, queue_max=8),
        Scenario("unlimited", 48, 7, latency=0.05),
        Scenario("wide", 8000, 1, latency=0.05),
        Scenario("threaded-small", 48, 7, capacity=4, foreign=True),
        Scenario("threaded-large", 192, 7, capacity=32, foreign=True),
        Scenario("cluster-small", 48, 7, capacity=4, workers=CLUSTERS),
        Scenario("cluster-large", 192, 7, capacity=32, workers=CLUSTERS),
        Scenario("shards-small", 48, 7, capacity=4, shards=4),
        Scenario("shards-large", 192, 7, capacity=32, shards=4),
    )
}
QUICK = {
    "small": Scenario("small", 8, 2, capacity=4),
    "unlimited": Scenario("unlimited", 8, 2, latency=0.05),
    "cluster-small": Scenario("cluster-small", 8, 2, capacity=4, workers=(2,)),
    "shards-small": Scenario("shards-small", 8, 2, capacity=4, shards=2),
}


@dataclass
class Row:
    scenario: str
    contender: str
    seconds: float
    requests: int
    served_per_second: float
    share: float | None  # of the capacity (the latency bound, unlimited)
    server_p95_over_t: float | None
    refused: int
    refused_share: float
    failed_windows: int
    peak_rss_mb: float
    status: str = "ok"  # the run's: "failed" when a window's retries gave up (exit 5)
    capacity: dict = field(default_factory=dict)  # the run summary's
    after_change: dict | None = None


def emulator_args(s: Scenario, log: Path | None = None) -> list[str]:
    args = [
        "--objects",
        str(objects_for(s.params)),
        "--params-per-object",
        str(PER_OBJECT[0]),
        "--calc-per-object",
        str(PER_OBJECT[1]),
        "--period-range",
        # Capacity scenarios: few points an answer, so that the emulator's own CPU (two cores shared with
        # etl) stays far below what its workers serve.
        "300:900" if s.capacity else "10:60" if s.params < 1000 else "10:900",
        "--now",
        iso(to_ms(START) + (s.days + 1) * DAY_MS),
    ]
    if log is not None:
        args += ["--request-log", str(log)]
    return args


def p95(values: list[float]) -> float | None:
    values = sorted(values)
    return values[min(len(values) - 1, int(0.95 * len(values)))] if values else None


def served(entries: list[dict], since_ms: float | None = None) -> tuple[float, int, list[float]]:
    """Requests served a second from the first series request (or `since_ms`) to the last answer; how
    many were refused for load; the times in the server."""
    api = [e for e in entries if not e.get("outside")]
    first = since_ms if since_ms is not None else min(e["ts"] for e in api if "interval_ms" in e)
    window = [e for e in api if e["ts"] >= first]
    ok = [e for e in window if e["status"] == 200]
    last = max(e["ts"] + e.get("server_ms", 0) for e in window)
    refused = sum(1 for e in window if e.get("fault") == "shed" or e["status"] in (429, 503))
    return (
        len(ok) / max((last - first) / 1000, 1e-3),
        refused,
        [e["server_ms"] for e in window if "server_ms" in e],
    )


def etl_once(config: Path, out: Path, *options: str) -> tuple[dict, dict]:
    """One `etl run --json`: its summary, whatever the outcome, and its process's figures."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [PY, "-m", "etl", "run", "-c", str(config), "--json", "--no-progress", *options]
    return run_child(cmd, cwd=out.parent, check=False)


def start_emulator(s: Scenario, work: Path) -> Emulator:
    extra = []
    if s.capacity:
        extra += ["--capacity", str(s.capacity), "--service-time", str(SERVICE)]
    if s.queue_max is not None:
        extra += ["--queue-max", str(s.queue_max)]
    if s.latency:
        extra += ["--latency", str(s.latency)]
    return Emulator(work, s.name, emulator_args(s) + extra)


def run_emulator_scenario(s: Scenario, args: argparse.Namespace, work: Path) -> list[Row]:
    emulator = start_emulator(s, work)
    rows = []
    try:
        for contender in args.contenders:
            concurrency = CONTENDERS[contender]
            config = write_config(
                work / f"{s.name}.yaml", emulator.base_url, work / "out", s.days, concurrency
            )
            if s.capacity:
                emulator.control.set_capacity(s.capacity)
            emulator.control.clear_requests()
            changed: list[float] = []
            timer = None
            if s.halve:

                def halve(changed: list[float] = changed) -> None:
                    changed.append(time.time() * 1000)
                    emulator.control.set_capacity(s.capacity // 2)

                timer = threading.Timer(args.halve_at, halve)
                timer.start()
            try:
                summary, usage = etl_once(config, work / "out")
            finally:
                if timer is not None:
                    timer.cancel()
            rows.append(row(s, contender, summary, usage, emulator.control.requests(), changed))
            print_row(rows[-1])
    finally:
        emulator.stop()
    return rows


def row(
    s: Scenario, contender: str, summary: dict, usage: dict, entries: list[dict], changed: list[float]
) -> Row:
    rate, refused, times = served(entries)
    requests = summary["requests"]
    if s.capacity:
        share: float | None = rate / (s.capacity / SERVICE)
    else:
        share = requests * s.latency / 16 / summary["seconds"]  # the latency bound of 16 in flight
    out = Row(
        s.name,
        contender,
        summary["seconds"],
        requests,
        rate,
        share,
        None if not s.capacity or not times else (p95(times) or 0) / 1000 / SERVICE,
        refused,
        refused / max(requests, 1),
        summary["failed_window_count"],
        usage["peak_rss_mb"],
        summary["status"],
        summary.get("capacity") or {},
    )
    if changed and s.capacity:
        since = changed[0] + 10_000
        later = [e for e in entries if e["ts"] >= since]
        if later:
            rate, refused, times = served(entries, since)
            out.after_change = {
                "share": rate / (s.capacity // 2 / SERVICE),
                "server_p95_over_t": (p95(times) or 0) / 1000 / SERVICE,
                "requests": len(later),
            }
    return out


class Cluster:
    """A Dask scheduler and `workers` worker processes of `threads` threads, on loopback, in processes of
    their own (as `make demo-dask` starts them)."""

    def __init__(self, work: Path, workers: int, threads: int = THREADS) -> None:
        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        self.log = open(work / f"dask-{workers}.log", "wb")  # noqa: SIM115
        dask = str(Path(PY).parent / "dask")
        common = ["--no-dashboard"]
        self.procs = [
            subprocess.Popen(
                [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), *common],
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
        ]
        self.procs.append(
            subprocess.Popen(
                [
                    dask,
                    "worker",
                    self.address,
                    "--nworkers",
                    str(workers),
                    "--nthreads",
                    str(threads),
                    *common,
                ],
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
        )
        from distributed import Client

        with Client(self.address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


def run_spread_scenario(s: Scenario, args: argparse.Namespace, work: Path) -> list[Row]:
    """`extract.concurrency: auto` on Dask clusters of each size in `s.workers` (or `--workers`), or as
    `s.shards` shards started together: the server sees all of them at once."""
    emulator = start_emulator(s, work)
    rows = []
    try:
        config = write_config(work / f"{s.name}.yaml", emulator.base_url, work / "out", s.days, "auto")
        for size in (args.workers or s.workers) if s.workers else (s.shards,):
            if s.workers:
                cluster = Cluster(work, size, args.threads)
                try:
                    emulator.control.clear_requests()
                    summary, usage = etl_once(
                        config, work / "out", "--executor", "dask", "--scheduler", cluster.address
                    )
                finally:
                    cluster.stop()
                contender = f"{size} worker{'s' * (size > 1)}"
                if args.threads != THREADS:
                    contender += f" x{args.threads}"
            else:
                summary, usage = shards_at_once(config, work / "out", size)
                contender = f"{size} shards"
            rows.append(row(s, contender, summary, usage, emulator.control.requests(), []))
            print_row(rows[-1])
    finally:
        emulator.stop()
    return rows


def shards_at_once(config: Path, out: Path, shards: int) -> tuple[dict, dict]:
    """`shards` runs of `config`, `--shard I/N`, started together: their summaries added up (seconds: the
    longest; capacity: the first shard's, which learned the whole limit as they all did)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    done: list[tuple[dict, dict]] = [({}, {})] * shards

    def one(index: int) -> None:
        cmd = [
            PY,
            "-m",
            "etl",
            "run",
            "-c",
            str(config),
            "--json",
            "--no-progress",
            "--shard",
            f"{index}/{shards}",
        ]
        done[index] = run_child(cmd, cwd=out.parent, check=False)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(shards)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summaries = [summary for summary, _ in done]
    summary = dict(summaries[0])
    summary["seconds"] = max(x["seconds"] for x in summaries)
    summary["requests"] = sum(x["requests"] for x in summaries)
    summary["failed_window_count"] = sum(x["failed_window_count"] for x in summaries)
    summary["status"] = "ok" if all(x["status"] == "ok" for x in summaries) else "failed"
    usage = {"peak_rss_mb": max(u["peak_rss_mb"] for _, u in done)}
    return summary, usage


def run_foreign_scenario(s: Scenario, work: Path) -> list[Row]:
    """The recording of the emulator's answers to both contenders' runs, replayed by the threaded server
    with a pool of workers."""
    log = work / f"{s.name}.jsonl"
    emulator = Emulator(work, s.name, emulator_args(s, log))
    rows = []
    proc = None
    try:
        for concurrency in CONTENDERS.values():  # both record: their discovery may differ
            etl_once(
                write_config(work / "warm.yaml", emulator.base_url, work / "out", s.days, concurrency),
                work / "out",
            )
        recording = record(
            emulator.url, emulator.base_url.removeprefix(emulator.url), log, work / f"rec-{s.name}"
        )
        proc, url = start_threaded(
            recording, emulator, "--workers", str(s.capacity), "--service-time", str(SERVICE)
        )
        for contender, concurrency in CONTENDERS.items():
            config = write_config(
                work / "threaded.yaml", url + recording.base_path, work / "out", s.days, concurrency
            )
            httpx.get(url + "/_bench/reset")
            summary, usage = etl_once(config, work / "out")
            stats = httpx.get(url + "/_bench/stats").json()
            rate = (
                stats["timed"] / summary["seconds"]
            )  # sign-in to the last write: a little under the server's
            rows.append(
                Row(
                    s.name,
                    contender,
                    summary["seconds"],
                    summary["requests"],
                    rate,
                    rate / (s.capacity / SERVICE) if s.capacity else None,
                    stats["server_ms_p95"] / 1000 / SERVICE,
                    0,
                    0.0,
                    summary["failed_window_count"],
                    usage["peak_rss_mb"],
                    summary["status"],
                    summary.get("capacity") or {},
                )
            )
            print_row(rows[-1])
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        emulator.stop()
    return rows


HEADER = (
    f"{'scenario':<15} {'etl':<10} {'seconds':>8} {'requests':>8} {'served/s':>8} {'of capacity':>11} "
    f"{'p95 server':>10} {'refused':>11} {'failed':>6} {'concurrency':>13} {'baseline':>8} {'p95 ms':>7} {'RSS MB':>6}"
)


def print_row(r: Row) -> None:
    c = r.capacity.get("concurrency") or {}
    lat = r.capacity.get("latency_ms") or {}
    used = f"{c.get('min')}/{c.get('median')}/{c.get('max')}"
    share = "-" if r.share is None else f"{r.share:.2f}" + (" bound" if r.server_p95_over_t is None else "")
    p95s = "-" if r.server_p95_over_t is None else f"{r.server_p95_over_t:.2f} T"
    print(
        f"{r.scenario:<15} {r.contender:<10} {r.seconds:>8.2f} {r.requests:>8} {r.served_per_second:>8.1f} "
        f"{share:>11} {p95s:>10} {r.refused:>5} ({r.refused_share:.1%}) {r.failed_windows:>6} {used:>13} "
        f"{lat.get('baseline')!s:>8} {lat.get('p95')!s:>7} {r.peak_rss_mb:>6.0f}"
        + ("" if r.status == "ok" else f"  run {r.status}: a window's retries gave up"),
        flush=True,
    )
    if r.after_change:
        a = r.after_change
        print(
            f"{'':<15} {'':<9} from 10 s after the change: {a['share']:.2f} of the new capacity, "
            f"p95 in the server {a['server_p95_over_t']:.2f} T ({a['requests']} requests)",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--halve-at", type=float, default=10.0, help="seconds into the halving run")
    parser.add_argument("--quick", action="store_true", help="tiny fleets: checks the script works")
    parser.add_argument(
        "--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS), metavar="NAME"
    )
    parser.add_argument(
        "--workers", nargs="+", type=int, help=f"the cluster scenarios' sizes (default {list(CLUSTERS)})"
    )
    parser.add_argument(
        "--threads", type=int, default=THREADS, help=f"each cluster worker's threads (default {THREADS})"
    )
    parser.add_argument("--json", type=Path, default=HERE / "results" / "capacity.json")
    args = parser.parse_args()
    os.environ["ETL_PASSWORD"] = "demo"
    scenarios = list(QUICK.values()) if args.quick else [SCENARIOS[n] for n in args.scenarios]
    doc: dict = {"environment": environment(), "service_time": SERVICE, "rows": []}
    print(
        f"environment: Python {doc['environment']['python']}, {doc['environment']['cores']} cores, "
        f"load average {doc['environment']['load_average_start']}; T = {SERVICE * 1000:g} ms"
    )
    print(HEADER)
    work = Path(tempfile.mkdtemp(prefix="etl-capacity-"))
    try:
        for s in scenarios:
            where = work / s.name
            where.mkdir()
            if s.foreign:
                rows = run_foreign_scenario(s, where)
            elif s.workers or s.shards:
                rows = run_spread_scenario(s, args, where)
            else:
                rows = run_emulator_scenario(s, args, where)
            doc["rows"] += [asdict(r) for r in rows]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
