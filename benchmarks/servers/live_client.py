"""The benchmarks' and tests' side of servers/live.py: start it, move its clock, read its figures, and
compute in this process exactly what it serves.

    python benchmarks/servers/live_client.py [--objects 125] [--params 1000] [--concurrency 16]

run as a script, measures the server's throughput with wrk (`make bench-tools`): each parameter's last
hour of raw points (an hourly run's request), then its last day of raw points, 30-minute averages and
candles (a first load's), all keep-alive; it prints requests a second and the server's CPU a request.

    with live_client.start(tmp_dir, objects=4, params=16, now="2026-11-11T00:07:00Z", fleet={...}) as live:
        ... etl against live.base_url ...
        live.set_clock(ms)
        want = live.expected("raw", start, end)  # what it serves at its clock, [start, end)
        live.stats()

`expected` uses the server's own model (`servers.live.Fleet`, rebuilt from `GET /_bench/fleet`): the
same integers of hundredths, the same buckets, the same quotients, so a schedule's output can be
compared with it row for row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import numpy as np
import psutil
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import free_port  # noqa: E402
from servers import wrk  # noqa: E402
from servers.live import DAY, HOUR, SHARES, Fleet, to_ms  # noqa: E402
from servers.record import Request  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "live.py"
TS = pa.timestamp("ms", tz="UTC")
VALUES = {"raw": ("value",), "average": ("value",), "candles": ("open", "high", "low", "close")}
FLAGS = ("objects", "params", "seed", "base_path", "latency", "workers", "service_time", "max_count", *SHARES)


def plan(objects: int, params: int, seed: int = 1) -> Fleet:
    """The fleet a server of these flags holds, before any behaviour: to pick ids for a fleet file."""
    return Fleet(objects, params, seed)


class Live:
    """A running servers/live.py; a context manager that stops it."""

    def __init__(self, proc: subprocess.Popen[str], port: int, base_path: str, log: Path) -> None:
        self.proc, self.log = proc, log
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = self.url + base_path.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=60)
        self._fleet: Fleet | None = None

    def __enter__(self) -> Live:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _call(self, method: str, path: str, **params: Any) -> Any:
        answer = self._http.request(method, path, params=params)
        answer.raise_for_status()
        return answer.json()

    def set_clock(self, when: int | str) -> int:
        """Moves the platform's clock (epoch ms or ISO 8601); its new value."""
        now: int = self._call("PUT", "/_bench/clock", ms=to_ms(when))["now"]
        return now

    def clock(self) -> int:
        now: int = self._call("GET", "/_bench/clock")["now"]
        return now

    def stats(self) -> dict[str, Any]:
        """Requests and bytes by route kind and status, p95 time in the server (see live.py)."""
        stats: dict[str, Any] = self._call("GET", "/_bench/stats")
        return stats

    def reset(self) -> dict[str, Any]:
        stats: dict[str, Any] = self._call("POST", "/_bench/reset")
        return stats

    def set_latency(self, seconds: float) -> None:
        self._call("PUT", "/_bench/latency", seconds=seconds)

    def fleet(self) -> Fleet:
        """The server's fleet and behaviour (its clock aside: `expected` takes one)."""
        if self._fleet is None:
            self._fleet = Fleet.from_json(self._call("GET", "/_bench/fleet"))
        return self._fleet

    def expected(
        self, series: str, start: int | str, end: int | str, clock: int | str | None = None
    ) -> pa.Table:
        """What etl keeps of the server's answers for [start, end) at `clock` (default: its clock now);
        see `expected` below."""
        return expected(
            self.fleet(), series, to_ms(start), to_ms(end), self.clock() if clock is None else to_ms(clock)
        )

    def stop(self) -> None:
        self._http.close()
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.proc.kill()  # nothing once it has ended
        self.proc.wait()


def start(
    tmp_dir: Path | str, *, now: int | str, fleet: dict[str, Any] | None = None, **options: Any
) -> Live:
    """servers/live.py on a free loopback port, once it says "ready". `options`: its flags by their
    Python names (objects, params, seed, base_path, latency, workers, service_time, max_count, the
    shares); `fleet`: the behaviour a fleet file gives, written to `tmp_dir`."""
    unknown = set(options) - set(FLAGS)
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(sorted(unknown))}")
    tmp = Path(tmp_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [sys.executable, str(SCRIPT), "--port", str(port), "--now", str(to_ms(now))]
    for name, value in options.items():
        if value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    if fleet is not None:
        path = tmp / f"live-fleet-{port}.json"
        path.write_text(json.dumps(fleet))
        args += ["--fleet", str(path)]
    log = tmp / f"live-{port}.log"
    with log.open("w") as errors:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.wait(10)
        raise RuntimeError(f"servers/live.py did not start: {log.read_text().strip()[-2000:]}")
    return Live(proc, port, options.get("base_path") or "/sem-restservices", log)


def expected(
    fleet: Fleet, series: str, start: int, end: int, clock: int, params: Iterable[int] | None = None
) -> pa.Table:
    """What a client that asks [start, end] (the document's bounds, both included) and keeps [start, end)
    holds of every parameter (or those of `params`) when the server answers at `clock`: the points, or
    the buckets, stamped in [start, end), as etl writes them (object_id, param_id, kind, ts as ms UTC, the
    series' values), sorted by parameter and time. The server aggregates only the points inside the
    interval asked: a bucket cut by `start` is stamped before it (and left out), one that holds `end`
    aggregates the point stamped at `end` too."""
    columns: dict[str, list[np.ndarray]] = {
        name: [] for name in ("object_id", "param_id", "kind", "ts", *VALUES[series])
    }
    wanted = None if params is None else set(params)
    for p in sorted(fleet.params, key=lambda p: p.id):
        if wanted is not None and p.id not in wanted:
            continue
        if series == "raw":
            ts, hundredths = fleet.raw(p, start, end, clock)
            values: tuple[np.ndarray, ...] = (hundredths / 100,)
        elif series == "average":
            ts, mean = fleet.average(p, start, end, clock)
            values = (mean,)
        else:
            ts, o, h, lo, c = fleet.candles(p, start, end, clock)
            values = (o, h, lo, c)
        keep = (ts >= start) & (ts < end)
        n = int(keep.sum())
        columns["object_id"].append(np.full(n, p.object_id, np.int64))
        columns["param_id"].append(np.full(n, p.id, np.int64))
        columns["kind"].append(np.full(n, p.kind, object))
        columns["ts"].append(ts[keep])
        for name, v in zip(VALUES[series], values, strict=True):
            columns[name].append(v[keep].astype(np.float64))
    types = {"object_id": pa.int64(), "param_id": pa.int64(), "kind": pa.string(), "ts": TS}
    return pa.table(
        {
            name: pa.array(np.concatenate(parts) if parts else [], type=types.get(name, pa.float64()))
            for name, parts in columns.items()
        }
    )


ROUTES = {"physical": "measure", "signal": "signal", "calculated": "calcvalue"}


def _paths(live: Live, shape: str, n: int) -> list[Request]:
    """`n` requests of one shape, over the fleet's parameters in turn, ending at the clock."""
    fleet, now = live.fleet(), live.clock()
    base = live.base_url.removeprefix(live.url)
    found = []
    for i in range(n):
        p = fleet.params[i % len(fleet.params)]
        route = (
            ROUTES[p.kind]
            if shape.startswith("raw")
            else "calcvalue"
            if p.kind == "calculated"
            else "measure"
        )
        series = "" if shape.startswith("raw") else f"/{shape}"
        start = now - (HOUR if shape == "raw-hour" else DAY)
        found.append(Request("GET", f"{base}/db/{route}{series}/{p.id}/{start}/{now}", "count=5000"))
    return found


def throughput(live: Live, shape: str, n: int, concurrency: int) -> dict[str, float]:
    """`n` requests of `shape` (raw-hour, raw-day, average, candles) replayed by wrk: requests a second,
    the server's CPU a request (ms) and its p95 time a request (ms)."""
    answer = httpx.post(f"{live.base_url}/auth/login", params={"username": "demo", "password": "demo"})
    cookie = "; ".join(f"{k}={answer.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))
    recording = type("Requests", (), {"requests": _paths(live, shape, n)})
    server = psutil.Process(live.proc.pid)
    live.reset()
    cpu = sum(server.cpu_times()[:2])
    done = wrk.replay(recording, live.url, concurrency, cookie)  # type: ignore[arg-type]
    cpu = sum(server.cpu_times()[:2]) - cpu
    stats = live.stats()
    if done["errors"] or stats["by_status"] != {"200": n}:
        raise RuntimeError(f"{shape}: {done['errors']} errors, statuses {stats['by_status']}")
    return {
        "requests_per_second": n / done["seconds"],
        "server_cpu_ms": 1000 * cpu / n,
        "server_ms_p95": stats["server_ms_p95"],
        "bytes_per_request": stats["bytes"] / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--objects", type=int, default=125)
    parser.add_argument("--params", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=3000, help="of each shape")
    parser.add_argument("--now", default="2026-11-11T00:07:00Z")
    args = parser.parse_args()
    if why := wrk.missing():
        sys.exit(why)
    with (
        tempfile.TemporaryDirectory() as tmp,
        start(tmp, now=args.now, objects=args.objects, params=args.params) as live,
    ):
        print(f"{args.params:,} parameters, {args.concurrency} connections, load {os.getloadavg()[0]:.1f}")
        for shape in ("raw-hour", "raw-day", "average", "candles"):
            t = time.perf_counter()
            row = throughput(live, shape, args.requests, args.concurrency)
            print(
                f"  {shape:<9} {row['requests_per_second']:>7.0f} requests/s  {row['server_cpu_ms']:5.2f} ms CPU "
                f"a request  p95 {row['server_ms_p95']} ms  {row['bytes_per_request'] / 1000:6.1f} kB an answer "
                f"({time.perf_counter() - t:.1f} s)"
            )


if __name__ == "__main__":
    main()
