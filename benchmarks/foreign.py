"""`etl run` against servers that are not ours, next to the limits of the same requests.

    python benchmarks/foreign.py [--params 48] [--days 7] [--period-range 10:60] [--latencies 0 0.01 0.05]
                                 [--servers emulator threaded nginx] [--repeat 3] [--quick] [--json PATH]
                                 [--trees OLD=/path/to/checkout NEW=.] [--etl-concurrency auto 16]

For each fleet size the emulator (its own process: `--objects N/8 --params-per-object 6
--calc-per-object 2`) serves a warm-up `etl run` (every series, dimension tables, the default config);
its request log names every request etl made, and the emulator's answers to them are recorded
(servers/record.py). Three servers then answer exactly those requests, each after the added latency:

- **emulator**: ours (uvicorn, httptools, one worker), from its answer cache;
- **threaded**: the standard library's ThreadingHTTPServer replaying the recording (servers/threaded.py);
- **nginx**: Debian's nginx serving the recorded bodies as static files (servers/nginx.py).

Against each server and latency, in one run and alternating (`--repeat` times, medians kept):
`etl run` (sign-in to the last byte written, as `make bench` times it); **httpx**, bare httpx on
uvloop replaying the same requests (benchmarks/peers.py ceiling-uvloop); **wrk**, a compiled client
replaying them (servers/wrk.py). Beside them the limits that need no run: the **latency bound**
N x L / C (N requests, L the added latency, C in flight); the **CPU bound**, the contender's CPU and the
server's during its run shared among the cores (no wall can be shorter); and the **work floor**: the same
bodies decoded by Arrow and written as Parquet in one loop (servers/floor.py), in CPU seconds per million
points. etl's CPU is compared with it like for like: the run (its run record's `cpu_seconds`, sign-in to
the last byte) against the floor's loop, and the whole process (start-up included) against the floor's
whole process.

`--trees`: before and after. etl from each source tree in turn within every round, on the same recording
and servers, one row per tree (the recording is made by the installed etl). `--etl-concurrency`: etl's
`extract.concurrency` settings (`auto`, numbers), each in turn within every round, one row each; the
bound, bare httpx and wrk keep `--concurrency`.

A tool that is missing (nginx, its echo module, wrk) is reported as skipped, with the command that
installs it (`make bench-tools`).
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import psutil
import yaml
from servers import nginx as nginx_server
from servers import wrk as wrk_client
from servers.record import Recording, record

from etl.timeutil import DAY_MS, iso, to_ms
from harness import HERE, PY, Emulator, environment, free_port, run_child, save, tree_cpu_seconds

START = "2026-11-01T00:00:00Z"
PER_OBJECT = (6, 2)  # physical (the last a signal) and calculated parameters per object
SERVERS = ("emulator", "threaded", "nginx")
CORES = len(os.sched_getaffinity(0))
CONTENDERS = ("etl", "httpx", "wrk")


@dataclass
class Sample:
    seconds: float
    cpu_seconds: float = 0.0  # the contender's whole process
    peak_rss_mb: float = 0.0
    points: int = 0
    requests: int = 0
    # etl: its run record's (a build without it: None); the floor: its loop's
    run_cpu_seconds: float | None = None
    server_cpu_seconds: float = 0.0  # the server's, while the contender ran


@dataclass
class Cell:
    runs: list[Sample] = field(default_factory=list)
    skipped: str | None = None

    def median(self, key: str = "seconds") -> float:
        return statistics.median(getattr(r, key) for r in self.runs)


class Server:
    """One of the servers, answering the recording after `latency` seconds."""

    def __init__(self, name: str, emulator: Emulator, recording: Recording, work: Path) -> None:
        self.name, self.emulator, self.recording = name, emulator, recording
        self.proc: subprocess.Popen[str] | None = None
        self.nginx: nginx_server.Nginx | None = None
        if name == "emulator":
            self.url = emulator.url
        elif name == "threaded":
            self.proc, self.url = start_threaded(recording, emulator)
        else:
            self.nginx = nginx_server.Nginx(
                recording.root,
                work / "nginx",
                free_port(),
                free_port(),
                emulator.url,
                session_cookie(emulator.base_url),
            )
            self.url = self.nginx.url
        self.base_url = self.url + recording.base_path

    def latency(self, seconds: float) -> None:
        if self.name == "emulator":
            self.emulator.control.set_faults(latency=seconds)
        elif self.name == "threaded":
            httpx.put(f"{self.url}/_bench/latency", params={"seconds": seconds}).raise_for_status()
        else:
            assert self.nginx is not None
            self.nginx.start(seconds)

    def misses(self) -> int:
        if self.name == "threaded":
            return httpx.get(f"{self.url}/_bench/stats").json()["misses"]
        if self.nginx is not None:
            return self.nginx.misses()
        return 0

    def cpu_seconds(self) -> float:
        """CPU of the server's processes so far (nginx: its master and workers)."""
        if self.name == "emulator":
            return self.emulator.cpu_seconds()
        proc = self.proc if self.nginx is None else self.nginx.proc
        assert proc is not None
        return tree_cpu_seconds(psutil.Process(proc.pid))

    def cookie(self) -> str:
        """A session's Cookie header (only the emulator checks it)."""
        return session_cookie(self.base_url)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # a parent that ignores SIGTERM passes that on to its children
                self.proc.kill()
                self.proc.wait()
        if self.nginx is not None:
            self.nginx.stop()
        if self.name == "emulator":
            self.emulator.control.set_faults(latency=0.0)


def start_threaded(
    recording: Recording, emulator: Emulator, *options: str
) -> tuple[subprocess.Popen[str], str]:
    """servers/threaded.py answering the recording (what it lacks from the emulator), once it is ready;
    its process and URL."""
    port = free_port()
    proc = subprocess.Popen(
        [
            PY,
            str(HERE / "servers" / "threaded.py"),
            "--root",
            str(recording.root),
            "--port",
            str(port),
            "--fallback",
            emulator.url,
            "--fallback-cookie",
            session_cookie(emulator.base_url),
            *options,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if (said := proc.stdout.readline().strip()) != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"servers/threaded.py on port {port} did not start (it said {said!r})")
    return proc, f"http://127.0.0.1:{port}"


def session_cookie(base_url: str) -> str:
    answer = httpx.post(base_url + "/auth/login", params={"username": "demo", "password": "demo"}, timeout=30)
    answer.raise_for_status()
    return "; ".join(f"{k}={answer.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))


def objects_for(parameters: int) -> int:
    return max(1, parameters // sum(PER_OBJECT))


def write_config(path: Path, base_url: str, out: Path, days: int, concurrency: int | str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {"base_url": base_url, "username": "demo", "password": "${ETL_PASSWORD}"},
                "window": {"start": START, "end": iso(to_ms(START) + days * DAY_MS)},
                "extract": {"concurrency": concurrency},
                "sink": {"path": str(out)},
            }
        )
    )
    return path


def etl_once(config: Path, out: Path, tree: Path | None = None) -> Sample:
    """One `etl run`: the installed etl (or PYTHONPATH's), or that of the source tree `tree` (--trees).
    Started outside every tree: `python -m` puts the current folder first on the import path."""
    shutil.rmtree(out, ignore_errors=True)
    summary, usage = run_child(
        [PY, "-m", "etl", "run", "-c", str(config), "--json", "--no-progress"],
        None if tree is None else {"PYTHONPATH": str(tree)},
        cwd=out.parent,
    )
    return Sample(
        summary["seconds"],
        usage["cpu_seconds"],
        usage["peak_rss_mb"],
        summary["points"],
        summary["requests"],
        summary.get("cpu_seconds"),
    )


def floor_once(recording: Recording, work: Path) -> Sample:
    """One run of the work floor: its loop's CPU as `run_cpu_seconds`, its files as `requests`."""
    line, usage = run_child(
        [
            PY,
            str(HERE / "servers" / "floor.py"),
            "--recording",
            str(recording.root),
            "--out",
            str(work / "floor"),
        ]
    )
    shutil.rmtree(work / "floor", ignore_errors=True)
    return Sample(
        usage["wall"],
        usage["cpu_seconds"],
        usage["peak_rss_mb"],
        line["points"],
        line["files"],
        line["cpu_seconds"],
    )


def httpx_once(spec: Path) -> Sample:
    line, usage = run_child([PY, str(HERE / "peers.py"), "ceiling-uvloop", "--requests", str(spec)])
    return Sample(line["seconds"], usage["cpu_seconds"], usage["peak_rss_mb"])


def wrk_once(recording: Recording, server: Server, concurrency: int) -> Sample:
    line, usage = run_child(
        [
            PY,
            str(HERE / "servers" / "wrk.py"),
            "--recording",
            str(recording.root),
            "--url",
            server.url,
            "--concurrency",
            str(concurrency),
            "--cookie",
            server.cookie(),
        ]
    )
    if line["errors"]:
        raise RuntimeError(f"wrk got {line['errors']} errors from {server.name}")
    return Sample(line["seconds"], usage["cpu_seconds"], usage["peak_rss_mb"], requests=line["requests"])


def replay_spec(path: Path, recording: Recording, base_url: str, concurrency: int) -> Path:
    """What peers.py's ceiling replays: the recording's requests, relative to the base URL."""
    cut = len(recording.base_path)
    requests = [
        {
            "method": r.method,
            "path": r.path[cut:],
            "query": {
                k: v[0] if len(v) == 1 else v for k, v in parse_qs(r.query, keep_blank_values=True).items()
            },
        }
        for r in recording.requests
    ]
    path.write_text(
        json.dumps(
            {
                "base_url": base_url,
                "username": "demo",
                "password": "demo",
                "concurrency": concurrency,
                "requests": requests,
            }
        )
    )
    return path


def measure_size(args: argparse.Namespace, parameters: int, work: Path, skipped: dict[str, str]) -> dict:
    work.mkdir(parents=True)
    log = work / "requests.jsonl"
    emulator_args = [
        "--objects",
        str(objects_for(parameters)),
        "--params-per-object",
        str(PER_OBJECT[0]),
        "--calc-per-object",
        str(PER_OBJECT[1]),
        "--now",
        iso(to_ms(START) + (args.days + 1) * DAY_MS),
        "--request-log",
        str(log),
    ]
    if args.period_range:
        emulator_args += ["--period-range", args.period_range]
    emulator = Emulator(work, "emulator", emulator_args)
    doc: dict = {"parameters": objects_for(parameters) * sum(PER_OBJECT), "days": args.days, "servers": {}}
    try:
        warm_config = write_config(
            work / "warm.yaml", emulator.base_url, work / "out", args.days, args.concurrency
        )
        # Two runs: the few requests that depend on timing (checks for a silent cap on answers) differ
        # between runs; both runs' are recorded, and what a later run asks beyond them is a miss.
        warm = etl_once(warm_config, work / "out")
        etl_once(warm_config, work / "out")
        recording = record(
            emulator.url, emulator.base_url.removeprefix(emulator.url), log, work / "recording"
        )
        shutil.rmtree(work / "out", ignore_errors=True)
        n = len(recording.requests) + 1  # and the sign-in
        doc.update(points=warm.points, requests=n)
        floor = floor_once(recording, work)  # and each round again, beside etl's runs (_row)
        per_million = 1e6 / max(floor.points, 1)
        doc["floor"] = {
            "points": floor.points,
            "files": floor.requests,
            "cpu_per_million": (floor.run_cpu_seconds or 0) * per_million,
            "process_cpu_per_million": floor.cpu_seconds * per_million,
        }
        print(
            f"\n{doc['parameters']:,} parameters x {args.days} days: {warm.points:,} points in {n:,} requests, "
            f"{args.concurrency} in flight; {CORES} cores; work floor {doc['floor']['cpu_per_million']:.2f} "
            f"CPU s per million points in its loop, {doc['floor']['process_cpu_per_million']:.2f} as a whole "
            f"process ({floor.points:,} points, {floor.requests} files; again in every round)",
            flush=True,
        )
        for name in args.servers:
            if name in skipped:
                doc["servers"][name] = {"skipped": skipped[name]}
                print(f"  {name}: skipped: {skipped[name]}")
                continue
            server = Server(name, emulator, recording, work)
            try:
                doc["servers"][name] = serve(args, server, recording, work, n, skipped)
            finally:
                server.stop()
    finally:
        emulator.stop()
    return doc


def serve(
    args: argparse.Namespace,
    server: Server,
    recording: Recording,
    work: Path,
    n: int,
    skipped: dict[str, str],
) -> dict:
    settings = args.etl_concurrency or [args.concurrency]
    configs = {
        setting: write_config(
            work / f"etl-{server.name}-{setting}.yaml", server.base_url, work / "out", args.days, setting
        )
        for setting in settings
    }
    spec = replay_spec(work / f"spec-{server.name}.json", recording, server.base_url, args.concurrency)
    out: dict = {}
    trees: dict[str, Path | None] = args.trees or {"": None}
    # etl's builds: each source tree at each concurrency setting, named by what differs
    names = {
        " ".join(part for part in (tree, f"c={setting}" if len(settings) > 1 else "") if part): (
            path,
            setting,
        )
        for tree, path in trees.items()
        for setting in settings
    }
    for latency in args.latencies:
        server.latency(latency)
        misses = server.misses()
        cells = {
            name: Cell(skipped=skipped.get(name) or (None if name in args.contenders else "--contenders"))
            for name in CONTENDERS
        }
        builds = {name: Cell() for name in names}  # etl's runs, of each build in turn
        floor = Cell()  # the work floor, once a round: a host that slows down does so for both

        def timed(sample: Callable[[], Sample]) -> Sample:
            before = server.cpu_seconds()
            out = sample()
            out.server_cpu_seconds = server.cpu_seconds() - before
            return out

        for _ in range(args.repeat):
            for name, cell in cells.items():
                if cell.skipped:
                    continue
                if name == "etl":
                    for build, (path, setting) in names.items():
                        builds[build].runs.append(
                            timed(lambda p=path, c=configs[setting]: etl_once(c, work / "out", p))
                        )
                elif name == "httpx":
                    cell.runs.append(timed(lambda: httpx_once(spec)))
                else:
                    cell.runs.append(timed(lambda: wrk_once(recording, server, args.concurrency)))
            floor.runs.append(floor_once(recording, work))
        misses = server.misses() - misses
        for name, build in builds.items():
            cells["etl"] = build
            key = f"{latency * 1000:g}ms" + (f" {name}" if name else "")
            out[key] = row = _row(args, latency, n, misses, cells, floor)
            print_row(f"{server.name} {name}".strip(), row)
    return out


def _row(
    args: argparse.Namespace, latency: float, n: int, misses: int, cells: dict[str, Cell], floor: Cell
) -> dict:
    bound = n * latency / args.concurrency
    row = {
        "latency_s": latency,
        "requests": n,
        "latency_bound_s": bound,
        "misses": misses,
        **{
            name: {"skipped": c.skipped}
            if c.skipped
            else {
                "median_s": c.median(),
                "cpu_seconds": c.median("cpu_seconds"),
                "server_cpu_seconds": c.median("server_cpu_seconds"),
                # No wall can be shorter: the contender's and the server's CPU shared among the cores.
                "cpu_bound_s": (c.median("cpu_seconds") + c.median("server_cpu_seconds")) / CORES,
                "runs": [asdict(r) for r in c.runs],
            }
            for name, c in cells.items()
        },
    }
    etl = cells["etl"]
    points = etl.runs[0].points
    run_cpu = None if any(r.run_cpu_seconds is None for r in etl.runs) else etl.median("run_cpu_seconds")
    row["etl"].update(
        peak_rss_mb=max(r.peak_rss_mb for r in etl.runs),
        points=points,
        requests=etl.runs[0].requests,
        run_cpu_seconds=run_cpu,
        cpu_per_million=1e6 * row["etl"]["cpu_seconds"] / max(points, 1),
        run_cpu_per_million=None if run_cpu is None else 1e6 * run_cpu / max(points, 1),
    )
    per_million = 1e6 / max(floor.runs[0].points, 1)
    row["floor"] = {
        "cpu_per_million": floor.median("run_cpu_seconds") * per_million,
        "process_cpu_per_million": floor.median("cpu_seconds") * per_million,
        "runs": [asdict(r) for r in floor.runs],
    }
    # Like for like: the run (sign-in to the last byte) against the floor's loop, and the whole process
    # (start-up included) against the floor's whole process (its imports, reading the recording).
    row["run_cpu_vs_floor"] = (
        None if run_cpu is None else row["etl"]["run_cpu_per_million"] / row["floor"]["cpu_per_million"]
    )
    row["process_cpu_vs_floor"] = row["etl"]["cpu_per_million"] / row["floor"]["process_cpu_per_million"]
    row["etl_vs_bound"] = bound / etl.median() if bound else None
    row["etl_vs_httpx"] = None if cells["httpx"].skipped else cells["httpx"].median() / etl.median()
    row["etl_vs_wrk"] = None if cells["wrk"].skipped else cells["wrk"].median() / etl.median()
    return row


HEADER = (
    f"  {'server':<20} {'latency':>7} {'bound s':>8} {'wrk s':>7} {'httpx s':>8} {'etl s':>7} "
    f"{'etl/bound':>9} {'etl/httpx':>9} {'etl/wrk':>8} {'CPU-bound s':>11} {'server CPU':>10} "
    f"{'etl CPU s':>9} {'run CPU s':>9} {'CPU s/M run':>11} {'floor s/M':>9} {'run/floor':>9} {'proc/floor':>10} "
    f"{'RSS MB':>7} {'misses':>6}"
)


def print_row(server: str, row: dict) -> None:
    def s(name: str) -> str:
        cell = row[name]
        return "skip" if cell.get("skipped") else f"{cell['median_s']:.2f}"

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    e = row["etl"]
    print(
        f"  {server:<20} {row['latency_s'] * 1000:>5g}ms {row['latency_bound_s']:>8.2f} {s('wrk'):>7} "
        f"{s('httpx'):>8} {s('etl'):>7} {ratio(row['etl_vs_bound']):>9} {ratio(row['etl_vs_httpx']):>9} "
        f"{ratio(row['etl_vs_wrk']):>8} {e['cpu_bound_s']:>11.2f} {e['server_cpu_seconds']:>10.2f} "
        f"{e['cpu_seconds']:>9.2f} {ratio(e['run_cpu_seconds']):>9} {ratio(e['run_cpu_per_million']):>11} "
        f"{row['floor']['cpu_per_million']:>9.2f} {ratio(row['run_cpu_vs_floor']):>9} {ratio(row['process_cpu_vs_floor']):>10} "
        f"{e['peak_rss_mb']:>7.0f} {row['misses']:>6}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, nargs="+", default=[48], help="fleet sizes (parameters)")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--period-range", default="10:60", help="sampling periods in seconds (emulator)")
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.0, 0.01, 0.05], help="seconds")
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight (the bound, httpx, wrk)"
    )
    parser.add_argument(
        "--etl-concurrency",
        nargs="+",
        type=lambda v: v if v == "auto" else int(v),
        default=[],
        metavar="N|auto",
        help="etl's extract.concurrency, each in turn within every round (default: --concurrency)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each contender (medians kept)")
    parser.add_argument("--quick", action="store_true", help="a tiny fleet, one run: checks the script works")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "foreign.json")
    parser.add_argument(
        "--trees",
        nargs="+",
        metavar="NAME=PATH",
        default=[],
        help="etl from these source trees (checkouts), in turn within each round: before and after",
    )
    args = parser.parse_args()
    try:
        args.trees = {n: Path(p).resolve() for n, p in (t.split("=", 1) for t in args.trees)}
    except ValueError:
        parser.error("--trees: NAME=PATH")
    if "etl" not in args.contenders:
        parser.error("--contenders: etl is what the others are measured against")
    if args.quick:
        args.params, args.days, args.latencies, args.repeat = [16], 1, [0.0, 0.01], 1
    os.environ["ETL_PASSWORD"] = "demo"
    skipped = {
        name: why for name, why in (("nginx", nginx_server.missing()), ("wrk", wrk_client.missing())) if why
    }
    doc: dict = {"environment": environment(), "sizes": {}}
    env = doc["environment"]
    print(
        f"environment: Python {env['python']}, {env['cores']} cores, load average {env['load_average_start']}"
    )
    print(HEADER)
    workdir = Path(tempfile.mkdtemp(prefix="etl-foreign-"))
    workdir.chmod(0o755)  # nginx's workers run as another user when it is started as root
    try:
        for size in args.params:
            doc["sizes"][str(size)] = measure_size(args, size, workdir / f"fleet-{size}", skipped)
    finally:
        if not os.environ.get("FOREIGN_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("kept", workdir)
    save(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
