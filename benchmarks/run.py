"""`make bench`: `etl run` next to the download ceiling, a naive script and dlt, on one emulator.

    python benchmarks/run.py [--repeat 3] [--latency 0.05] [--also-latency 0 0.02] [--json PATH] [--quick]

One emulator process (fixed clock, fixed dataset) serves every contender; each contender runs in its
own process, timed from sign-in to its last write, and its peak RSS is read from the kernel
(wait4) when it exits. A first `etl run` warms the emulator's answer cache and records the exact
series requests etl makes; the ceilings (bare httpx, on asyncio's loop and on uvloop, which `etl run`
uses) and the peers replay exactly those. Contenders alternate
across repeats; the best run of each is compared (others on the machine only ever add time).
The emulator answers each request after `--latency` seconds (a server's own time: 50 ms by default,
where a run waits on the server as the issue assumes); the ceilings and etl are also compared at
`--also-latency` values, 0 included, where everything is CPU on the client. Then: peak RSS for
1 week vs 10 weeks of history, and the emulator's own requests per second.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from etl.config import load_config
from etl.pipeline.plan import Fleet, Plan, PlanOptions, spans_for
from etl.sinks.layout import auto_buckets
from etl.state import Coverage
from etl.timeutil import DAY_MS, iso, to_ms
from harness import HERE, PY, SERIES, Emulator, Measurement, environment, etl_run, peer_run, run_child

START = "2026-11-01T00:00:00Z"
TARGETS = {
    "ceiling_share": 0.85,
    "vs_naive": 5.0,
    "vs_dlt": 3.0,
    "peak_rss_mb": 250.0,
    "rss_growth": 0.20,
    "emulator_rps": 1000.0,
    "lake_vs_parquet": 1.2,
}


@dataclass(frozen=True)
class Shape:
    objects: int = 5
    params_per_object: int = 8  # the last one of each object is a signal parameter
    calc_per_object: int = 2
    period_range: str = "10:60"
    days: int = 7
    memory_days: tuple[int, int] = (7, 70)
    concurrency: int = 16

    @property
    def parameters(self) -> int:
        return self.objects * (self.params_per_object + self.calc_per_object)


@dataclass
class Result:
    name: str
    runs: list[Measurement] = field(default_factory=list)
    skipped: str | None = None

    def best(self) -> Measurement:
        return min(self.runs, key=lambda m: m.seconds)


QUICK = Shape(objects=1, params_per_object=3, calc_per_object=1, days=1, memory_days=(1, 2))


def write_config(
    path: Path, emulator: Emulator, out: Path, start: int, days: int, concurrency: int, fmt: str = "parquet"
) -> Path:
    config = {
        "source": {"base_url": emulator.base_url, "username": "demo", "password": "${ETL_PASSWORD}"},
        "select": {"objects": "all"},
        "series": list(SERIES),
        "window": {"start": iso(start), "end": iso(start + days * DAY_MS)},
        "extract": {"concurrency": concurrency},
        "sink": {"format": fmt, "path": str(out)},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def request_list(config_path: Path, emulator: Emulator, concurrency: int) -> dict:
    """The series requests of the warm-up `etl run` (from the emulator's log), checked against etl's
    own plan and labelled with what the plan knows of each (object, kind, series, window)."""
    config = load_config(config_path)
    params = asyncio.run(_discover(config))
    start, end = config.window.start_ms, config.window.end_ms(0)
    units = {}
    spans = spans_for(config.extract.raw_window, config.extract.aggregate_window)
    for slab in Plan(
        Fleet(params, config.sink.buckets or auto_buckets(len(params))),
        Coverage(),
        PlanOptions(start, end),
        config.series,
        spans,
    ).slabs():
        for u in slab.windows:
            units.setdefault((u.param_id, u.series.value), []).append(u)
    requests, covered = [], set()
    base_path = "/sem-restservices"
    for entry in emulator.control.requests():
        if "interval_ms" not in entry or entry["status"] != 200:
            continue
        path = entry["path"][len(base_path) :]
        s, e = (int(x) for x in path.rstrip("/").split("/")[-2:])
        series = "average" if "/average/" in path else "candles" if "/candles/" in path else "raw"
        unit = next((u for u in units[(entry["param_id"], series)] if (u.start, u.end) == (s, e)), None)
        if unit is None:
            continue  # etl checking an answer for a silent cap (a wider span, the rest from its last stamp)
        covered.add((unit.param_id, series, unit.start))
        requests.append(
            {
                "path": path,
                "query": entry["query"],
                "series": series,
                "param_id": unit.param_id,
                "object_id": unit.object_id,
                "kind": unit.kind.value,
                "start": s,
                "end": e,
            }
        )
    planned = sum(len(v) for v in units.values())
    if len(covered) != planned:
        raise RuntimeError(f"the warm-up run fetched {len(covered)} of {planned} planned windows")
    return {
        "base_url": emulator.base_url,
        "username": "demo",
        "password": "demo",
        "concurrency": concurrency,
        "planned_windows": planned,
        "requests": requests,
    }


async def _discover(config):
    from etl.pipeline.build import Build
    from etl.pipeline.discover import discover

    async with Build(config).client() as client:
        await client.sign_in()
        return (await discover(client, config.select)).params


def emulator_throughput(workdir: Path, now: str, seconds: float, workers: int) -> dict:
    """Requests per second of a raw 24 h window of a 60 s parameter, from a load generator process."""
    emulator = Emulator(
        workdir,
        f"emulator-rps-{workers}",
        [
            "--objects",
            "1",
            "--params-per-object",
            "2",
            "--calc-per-object",
            "0",
            "--period-range",
            "60:60",
            "--now",
            now,
            "--workers",
            str(workers),
        ],
    )
    try:
        start = to_ms(START)
        path = f"/db/measure/1001/{start}/{start + DAY_MS}"
        cpu = emulator.cpu_seconds()
        line, _ = run_child(
            [
                PY,
                str(HERE / "loadgen.py"),
                "--base-url",
                emulator.base_url,
                "--path",
                path,
                "--seconds",
                str(seconds),
            ]
        )
        return {**line, "workers": workers, "emulator_cpu_seconds": emulator.cpu_seconds() - cpu}
    finally:
        emulator.stop()


def compare(names: list[str], repeat: int, skipped: dict[str, str], run_one) -> dict[str, Result]:
    """Each contender `repeat` times, alternating, so that a busy spell on the machine hits all alike."""
    results = {name: Result(name, skipped=skipped.get(name)) for name in names}
    for _ in range(repeat):
        for name, result in results.items():
            if not result.skipped:
                result.runs.append(run_one(name))
                print(f"  {name:<14} {result.runs[-1].seconds:6.2f} s", flush=True)
    return results


def table(results: dict[str, Result], points: int) -> tuple[list[str], dict]:
    """The printed table and its JSON; ratios are between best times (sign-in to last write)."""
    ceiling = results["ceiling"].best()
    lines = [
        f"{'contender':<14} {'best s':>7} {'median s':>8} {'process s':>9} {'points/s':>9} {'vs ceiling':>10} "
        f"{'peak RSS MB':>11} {'CPU s':>6} {'server CPU s':>12} {'rows':>10}"
    ]
    doc = {}
    for name, r in results.items():
        if r.skipped:
            lines.append(f"{name:<14} skipped: {r.skipped}")
            continue
        b = r.best()
        median = statistics.median(m.seconds for m in r.runs)
        lines.append(
            f"{name:<14} {b.seconds:>7.2f} {median:>8.2f} {b.wall:>9.2f} {points / b.seconds / 1e3:>8,.0f}k "
            f"{ceiling.seconds / b.seconds:>10.0%} {b.peak_rss_mb:>11.0f} {b.cpu_seconds:>6.2f} "
            f"{b.emulator_cpu_seconds:>12.2f} {b.rows if not name.startswith('ceiling') else '-':>10}"
        )
        doc[name] = {
            "best": asdict(b),
            "median_seconds": median,
            "points_per_second": points / b.seconds,
            "share_of_ceiling": ceiling.seconds / b.seconds,
            "runs": [asdict(m) for m in r.runs],
        }
        if not name.startswith("ceiling") and b.rows != points:
            lines.append(f"  WARNING: {name} wrote {b.rows:,} rows, the source has {points:,}")
    return lines, doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each contender (the best is kept)")
    parser.add_argument(
        "--latency",
        type=float,
        default=0.05,
        help="seconds the emulator takes to answer in the main comparison (default 0.05)",
    )
    parser.add_argument(
        "--also-latency",
        type=float,
        nargs="*",
        default=[0.0, 0.02],
        help="further latencies for the ceilings and etl only (default 0 0.02)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny dataset, one run: checks the script works"
    )
    parser.add_argument(
        "--json", type=Path, default=HERE / "results" / "latest.json", help="where to write results"
    )
    parser.add_argument("--rps-seconds", type=float, default=5.0, help="length of the emulator load test")
    parser.add_argument("--skip", action="append", default=[], choices=["naive", "dlt", "memory", "emulator"])
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    os.environ["ETL_PASSWORD"] = "demo"  # the emulator's demo login, read by the generated configs
    shape = QUICK if args.quick else Shape()
    repeat = 1 if args.quick else args.repeat
    rps_seconds = 0.5 if args.quick else args.rps_seconds
    start = to_ms(START)
    now = iso(start + (max(shape.memory_days) + 1) * DAY_MS)
    doc: dict = {"environment": environment(), "shape": asdict(shape), "latency_s": args.latency}
    env = doc["environment"]
    print(
        f"environment: Python {env['python']} on {env['machine']}, {env['cores']} cores "
        f"({env['cores_usable']} usable), {env['memory_gb']} GB, load average {env['load_average_start']}"
    )
    skipped = {name: "--skip" for name in args.skip}
    try:
        import dlt  # noqa: F401
    except ImportError:
        skipped.setdefault("dlt", "dlt not installed (pip install -e '.[bench]')")
    workdir = Path(tempfile.mkdtemp(prefix="etl-bench-"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)  # also when a contender fails
    emulator = Emulator(
        workdir,
        "emulator",
        [
            "--objects",
            str(shape.objects),
            "--params-per-object",
            str(shape.params_per_object),
            "--calc-per-object",
            str(shape.calc_per_object),
            "--period-range",
            shape.period_range,
            "--now",
            now,
        ],
    )
    try:
        config = write_config(
            workdir / "bench.yaml", emulator, workdir / "etl-out", start, shape.days, shape.concurrency
        )
        warm = etl_run(
            config, workdir / "etl-out", emulator
        )  # also the first ask: the emulator caches the second
        spec = request_list(config, emulator, shape.concurrency)
        requests = workdir / "requests.json"
        requests.write_text(json.dumps(spec))
        points = warm.rows
        peer_run(
            "ceiling", requests, workdir / "ceiling-out", emulator
        )  # second ask: now every answer is cached
        doc["dataset"] = {
            "parameters": shape.parameters,
            "days": shape.days,
            "period_range_s": shape.period_range,
            "series": list(SERIES),
            "points": points,
            "requests": len(spec["requests"]),
            "planned_windows": spec["planned_windows"],
            "concurrency": shape.concurrency,
            "window": [iso(start), iso(start + shape.days * DAY_MS)],
        }
        print(
            f"dataset: {shape.parameters} parameters x {shape.days} days, sampling {shape.period_range} s, "
            f"raw + 30-min average + candles: {points:,} points in {len(spec['requests'])} requests "
            f"(concurrency {shape.concurrency}); best of {repeat}"
        )

        # The same run into lake tables (sink.format delta / iceberg), next to plain Parquet.
        lakes = {
            f"etl-{fmt}": (
                fmt,
                write_config(
                    workdir / f"bench-{fmt}.yaml",
                    emulator,
                    workdir / f"etl-{fmt}-out",
                    start,
                    shape.days,
                    shape.concurrency,
                    fmt,
                ),
            )
            for fmt in ("delta", "iceberg")
        }

        def run_one(name: str) -> Measurement:
            out = workdir / f"{name}-out"
            if name in lakes:
                return etl_run(lakes[name][1], out, emulator, lakes[name][0])
            return (
                etl_run(config, out, emulator) if name == "etl" else peer_run(name, requests, out, emulator)
            )

        doc["tables"] = {}
        contenders = ["ceiling", "ceiling-uvloop", "etl"]
        also = [0.0] if args.quick else args.also_latency
        runs = [(args.latency, [*contenders, *lakes, "naive", "dlt"])] + [(x, contenders) for x in also]
        for latency, names in runs:
            emulator.control.set_faults(latency=latency)
            print(
                f"\nthe emulator answers in {latency * 1000:g} ms"
                + (" (all work is CPU: the ceiling is what httpx alone can do)" if not latency else "")
            )
            lines, doc["tables"][f"{latency * 1000:g}ms"] = table(
                compare(names, repeat, skipped, run_one), points
            )
            print("\n".join(lines))
        emulator.control.set_faults(latency=0.0)

        if "memory" not in args.skip:
            runs = {}
            for days in shape.memory_days:
                cfg = write_config(
                    workdir / f"memory-{days}.yaml",
                    emulator,
                    workdir / "memory-out",
                    start,
                    days,
                    shape.concurrency,
                )
                runs[days] = m = etl_run(cfg, workdir / "memory-out", emulator)
                print(
                    f"memory: etl run over {days} days: {m.rows:,} points, peak RSS {m.peak_rss_mb:.0f} MB, "
                    f"{m.seconds:.1f} s"
                )
            small, large = (runs[d] for d in shape.memory_days)
            doc["memory"] = {str(d): asdict(m) for d, m in runs.items()}
            doc["memory"]["growth"] = large.peak_rss_mb / small.peak_rss_mb - 1
            print(
                f"memory: {shape.memory_days[1] // shape.memory_days[0]}x the history, peak RSS "
                f"{doc['memory']['growth']:+.1%}"
            )
    finally:
        emulator.stop()

    if "emulator" not in args.skip:
        doc["emulator"] = e = emulator_throughput(workdir, now, rps_seconds, workers=1)
        print(
            f"emulator: raw 24 h window of a 60 s parameter ({e['points_per_answer']} points, "
            f"{e['bytes_per_answer'] / 1e3:.0f} kB): {e['requests_per_second']:,.0f} requests/s with 1 worker, "
            f"{e['connections']} connections, {e['errors']} errors"
        )
    doc["environment"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["targets"] = checks = _targets(doc, f"{args.latency * 1000:g}ms")
    for name, (ok, text) in checks.items():
        print(f"target {name:<20} {'PASS' if ok else 'MISS'}  {text}")
    for key, t in doc["tables"].items():
        if key != f"{args.latency * 1000:g}ms":
            print(
                f"info   answers in {key:<9}   etl at {t['etl']['share_of_ceiling']:.0%} of the ceiling "
                f"({t['ceiling-uvloop']['best']['seconds'] / t['etl']['best']['seconds']:.0%} of bare httpx on uvloop)"
            )
    print(f"load average at the end: {doc['environment']['load_average_end']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print(f"results: {args.json}")
    return 1 if args.strict and not all(ok for ok, _ in checks.values()) else 0


def _targets(doc: dict, main: str) -> dict[str, tuple[bool, str]]:
    out = {}
    t = doc["tables"][main]
    share = t["etl"]["share_of_ceiling"]
    same_loop = t["ceiling-uvloop"]["best"]["seconds"] / t["etl"]["best"]["seconds"]
    out["ceiling_share"] = (
        share >= TARGETS["ceiling_share"],
        f"etl at {share:.0%} of the ceiling's points/s, "
        f"answers in {main} (>= 85%; {same_loop:.0%} of bare httpx on uvloop)",
    )
    etl = doc["tables"][main]["etl"]
    for lake in ("etl-delta", "etl-iceberg"):
        if lake in t:
            ratio = t[lake]["best"]["seconds"] / etl["best"]["seconds"]
            out[f"{lake}_vs_parquet"] = (
                ratio <= TARGETS["lake_vs_parquet"],
                f"{ratio:.2f}x plain Parquet's time, answers in {main} (<= {TARGETS['lake_vs_parquet']}x)",
            )
    for peer in ("naive", "dlt"):
        if peer in doc["tables"][main]:
            ratio = doc["tables"][main][peer]["best"]["seconds"] / etl["best"]["seconds"]
            want = TARGETS[f"vs_{peer}"]
            out[f"vs_{peer}"] = (ratio >= want, f"{ratio:.1f}x {peer}, answers in {main} (>= {want:g}x)")
    rss = max(t["etl"]["best"]["peak_rss_mb"] for t in doc["tables"].values())
    out["peak_rss"] = (rss < TARGETS["peak_rss_mb"], f"{rss:.0f} MB (< 250 MB)")
    if "memory" in doc:
        growth = doc["memory"]["growth"]
        out["rss_growth"] = (growth < TARGETS["rss_growth"], f"{growth:+.1%} for 10x the history (< 20%)")
    if "emulator" in doc:
        rps = doc["emulator"]["requests_per_second"]
        out["emulator_rps"] = (rps >= TARGETS["emulator_rps"], f"{rps:,.0f} requests/s (>= 1,000)")
    return out


if __name__ == "__main__":
    sys.exit(main())
