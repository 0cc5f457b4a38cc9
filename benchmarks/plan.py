"""`make bench-plan`: what a run spends the server's capacity on, on the emulator and on a live platform
built differently (servers/live.py), each a server process of its own.

    python benchmarks/plan.py [--scenarios freshness quiet late floor] [--servers emulator live]
        [--tree PATH] [--json PATH]

Every run is `etl run --json` in a child process with the tree's etl (`--tree`, default this checkout:
another commit's checkout measures it side by side), the server's clock moved as cron would find it.

- freshness: a first load of 30 days of 32 parameters behind a server of one worker busy 20 ms a
  request, each run given a 10 s slot (`retry.run_deadline`), hourly until the history is in: after
  each run, the share of parameters whose newest point is in the output, and of the history loaded.
- quiet: 48 parameters, 3/4 of them silent for three weeks; a first day, then 24 hourly runs: the series
  requests (probes included) against one per active parameter and series a run.
- late: 48 parameters; a first day, then 24 hourly runs, punctual and with each kind of lateness (a
  parameter 3 h late and a calculated one 2 h late; a controller offline 14 h, its backlog at once;
  calculated values revised 3 and 4 h after their stamps; all of them): the bytes of the series answers
  against the punctual schedule's.
- floor: 1,000 parameters on 125 objects, a first day, then 12 hourly runs, one across midnight: every
  request against the floor (per run, one per parameter and series, the sign-in and the object list).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "servers"))

import live_client  # noqa: E402

from etl.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, iso  # noqa: E402
from etl_emulator.config import EmulatorConfig  # noqa: E402
from harness import PY, Emulator, environment  # noqa: E402
from tests.support.expected import expected_table  # noqa: E402

# Days well behind the real clock: a run's `end: now` is the machine's clock too, cut at the server's.
START = (int(time.time()) * 1000 // DAY_MS - 40) * DAY_MS
SERIES_PATHS = ("/db/measure", "/db/calcvalue", "/db/signal")


class Platform(AbstractContextManager["Platform"]):
    """A server process with a clock: its base URL, the requests and bytes it served since `reset`, and
    the newest raw point of each parameter at a time."""

    base_url: str

    def set_clock(self, ms: int) -> None: ...

    def reset(self) -> None: ...

    def served(self) -> dict[str, int]:
        """requests, series_requests, series_bytes since the last reset."""
        ...

    def newest(self, start: int, end: int) -> dict[int, int]: ...

    def stop(self) -> None: ...

    def __exit__(self, *_: object) -> None:
        self.stop()


class EmulatorPlatform(Platform):
    def __init__(self, workdir: Path, config: EmulatorConfig) -> None:
        self.config = config
        faults = config.faults
        args = [
            "--seed", str(config.seed), "--objects", str(config.objects),
            "--params-per-object", str(config.params_per_object),
            "--calc-per-object", str(config.calc_per_object), "--now", str(config.now_ms),
            "--lateness", json.dumps(config.lateness.as_dict()),
        ]  # fmt: skip
        if faults.capacity:
            args += ["--capacity", str(faults.capacity), "--service-time", str(faults.service_time)]
        self.emulator = Emulator(workdir, "emulator", args)
        self.base_url = self.emulator.base_url

    def set_clock(self, ms: int) -> None:
        self.emulator.control.set_clock(ms)
        self.config.now_ms = ms

    def reset(self) -> None:
        self.emulator.control.clear_requests()

    def served(self) -> dict[str, int]:
        log = self.emulator.control.requests()
        series = [r for r in log if any(p in r["path"] for p in SERIES_PATHS)]
        return {
            "requests": len(log),
            "series_requests": len(series),
            "series_bytes": sum(int(r.get("bytes") or 0) for r in series),
        }

    def newest(self, start: int, end: int) -> dict[int, int]:
        table = expected_table(self.config, "raw", start, end)
        return _newest(table.column("param_id").to_pylist(), table.column("ts").cast("int64").to_pylist())

    def stop(self) -> None:
        self.emulator.stop()


class LivePlatform(Platform):
    def __init__(self, workdir: Path, now: int, fleet: dict[str, Any] | None, **options: Any) -> None:
        self.live = live_client.start(workdir, now=now, fleet=fleet, **options)
        self.base_url = self.live.base_url

    def set_clock(self, ms: int) -> None:
        self.live.set_clock(ms)

    def reset(self) -> None:
        self.live.reset()

    def served(self) -> dict[str, int]:
        kinds = self.live.stats()["by_kind"]
        series = [kinds[k] for k in ("raw", "average", "candles", "signal")]
        return {
            "requests": sum(k["requests"] for k in kinds.values()),
            "series_requests": sum(k["requests"] for k in series),
            "series_bytes": sum(k["bytes"] for k in series),
        }

    def newest(self, start: int, end: int) -> dict[int, int]:
        table = self.live.expected("raw", start, end)
        return _newest(table.column("param_id").to_pylist(), table.column("ts").cast("int64").to_pylist())

    def stop(self) -> None:
        self.live.stop()


def _newest(ids: list[int], ts: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p, t in zip(ids, ts, strict=True):
        out[p] = max(out.get(p, t), t)
    return out


@dataclass
class Runner:
    """`etl run --json` of one config in a child process, with the tree's etl."""

    tree: Path
    workdir: Path
    summaries: list[dict[str, Any]] = field(default_factory=list)

    def config(self, platform: Platform, name: str, **sections: Any) -> Path:
        out = self.workdir / name
        data = {
            "source": {"base_url": platform.base_url, "username": "demo", "password": "${ETL_PASSWORD}"},
            "window": {"start": iso(START), **sections.pop("window", {})},
            "sink": {"path": str(out)},
            **sections,
        }
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def run(self, config: Path) -> dict[str, Any]:
        env = {**os.environ, "ETL_PASSWORD": "demo", "PYTHONPATH": str(self.tree)}
        done = subprocess.run(
            [PY, "-m", "etl", "run", "-c", str(config), "--json", "--no-progress"],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.tree,
        )
        try:
            summary: dict[str, Any] = json.loads(done.stdout)
        except json.JSONDecodeError:
            raise RuntimeError(f"etl run exited {done.returncode}: {done.stderr.strip()[-1500:]}") from None
        self.summaries.append(summary)
        return summary


def output_newest(out: Path) -> dict[int, int]:
    import pyarrow.dataset as ds

    if not (out / "raw").exists():
        return {}
    table = ds.dataset(out / "raw", format="parquet", partitioning="hive").to_table(
        columns=["param_id", "ts"]
    )
    return _newest(table.column("param_id").to_pylist(), table.column("ts").cast("int64").to_pylist())


def emulator_fleet(
    now: int, objects: int, physical: int, calculated: int, lateness: dict[str, Any]
) -> EmulatorConfig:
    return EmulatorConfig(
        seed=7,
        objects=objects,
        params_per_object=physical,
        calc_per_object=calculated,
        now_ms=now,
        lateness=lateness,  # type: ignore[arg-type]
    )


# -- scenarios --------------------------------------------------------------------------------------


def freshness(server: str, runner: Runner) -> dict[str, Any]:
    days, clock = 30, START + 30 * DAY_MS + 7 * MINUTE_MS
    if server == "emulator":
        config = emulator_fleet(clock, 8, 3, 1, {})
        config.faults.capacity, config.faults.service_time = 1, 0.02
        platform: Platform = EmulatorPlatform(runner.workdir, config)
    else:
        platform = LivePlatform(
            runner.workdir, clock, None, objects=8, params=32, workers=1, service_time=0.02
        )
    rows = []
    with platform:
        path = runner.config(platform, f"fresh-{server}", retry={"run_deadline": 10})
        for run in range(12):
            platform.set_clock(clock)
            summary = runner.run(path)
            want = platform.newest(START, clock - MINUTE_MS)
            got = output_newest(runner.workdir / f"fresh-{server}")
            fresh = sum(1 for p, t in want.items() if got.get(p, 0) >= t - HOUR_MS) / max(len(want), 1)
            series = (summary.get("backfill") or {}).get("series") or {}
            done = series.get("raw", {}).get("share_done")
            rows.append(
                {"run": run, "fresh": round(fresh, 3), "history_done": done, "status": summary["status"]}
            )
            if summary["status"] == "ok":
                break
            clock += HOUR_MS
    return {"days": days, "parameters": 32, "runs": rows}


def _hourly(
    platform: Platform, runner: Runner, name: str, hours: int, first: int, **sections: Any
) -> list[dict[str, int]]:
    """A first run at `first`, then `hours` hourly runs: what the server served in each of those."""
    path = runner.config(platform, name, **sections)
    served = []
    clock = first
    for i in range(hours + 1):
        platform.set_clock(clock)
        platform.reset()
        runner.run(path)
        if i:
            served.append(platform.served())
        clock += HOUR_MS
    return served


def quiet(server: str, runner: Runner) -> dict[str, Any]:
    first = START + DAY_MS + 7 * MINUTE_MS
    if server == "emulator":
        config = emulator_fleet(first, 12, 3, 1, {})
        ids = sorted(p for o in range(1, 13) for p in [o * 1000 + j for j in (1, 2, 3)] + [o * 1000 + 501])
        silent = [p for i, p in enumerate(ids) if i % 4]  # three in four
        config.lateness = type(config.lateness)(
            quiet=[(p, START - 21 * DAY_MS, START + 99 * DAY_MS) for p in silent]
        )
        platform: Platform = EmulatorPlatform(runner.workdir, config)
        active = len(ids) - len(silent)
    else:
        fleet = live_client.plan(12, 48, 1)
        silent = [p.id for i, p in enumerate(sorted(fleet.params, key=lambda p: p.id)) if i % 4]
        quiet_spans = [[p, START - 21 * DAY_MS, None, False] for p in silent]
        platform = LivePlatform(runner.workdir, first, {"quiet": quiet_spans}, objects=12, params=48, seed=1)
        active = 48 - len(silent)
    hours = 24
    with platform:
        served = _hourly(platform, runner, f"quiet-{server}", hours, first)
    requests = sum(s["series_requests"] for s in served)
    floor = hours * 3 * active
    return {"active": active, "quiet": len(silent), "series_requests": requests, "floor_of_active": floor,
            "ratio": round(requests / floor, 3)}  # fmt: skip


SHAPES: dict[str, Callable[[list[int], list[int], list[int]], dict[str, Any]]] = {
    "punctual": lambda phys, calc, ctrls: {},
    "lag": lambda phys, calc, ctrls: {"lag": {phys[0]: 3 * HOUR_MS, calc[0]: 2 * HOUR_MS}},
    "offline": lambda phys, calc, ctrls: {
        "offline": [[ctrls[0], START + DAY_MS + 6 * HOUR_MS, START + DAY_MS + 20 * HOUR_MS]]
    },
    "revise": lambda phys, calc, ctrls: {"revise": {calc[0]: 4 * HOUR_MS, calc[1]: 3 * HOUR_MS}},
}


def late(server: str, runner: Runner) -> dict[str, Any]:
    first = START + DAY_MS + 7 * MINUTE_MS
    if server == "emulator":
        phys, calc, ctrls = [1001, 2002], [1501, 2501], [21]
    else:
        fleet = live_client.plan(12, 48, 1)
        phys = [p.id for p in fleet.params if p.kind == "physical"]
        calc = [p.id for p in fleet.params if p.kind == "calculated"]
        ctrls = [fleet.objects[1].controllers[0]]
    shapes = {name: make(phys, calc, ctrls) for name, make in SHAPES.items()}
    shapes["all"] = {k: v for shape in shapes.values() for k, v in shape.items()}
    figures: dict[str, Any] = {}
    for name, lateness in shapes.items():
        if server == "emulator":
            platform: Platform = EmulatorPlatform(runner.workdir, emulator_fleet(first, 12, 3, 1, lateness))
        else:
            fleet_file = {
                k: ({str(p): ms for p, ms in v.items()} if isinstance(v, dict) else v)
                for k, v in lateness.items()
            }
            platform = LivePlatform(runner.workdir, first, fleet_file, objects=12, params=48, seed=1)
        with platform:
            served = _hourly(platform, runner, f"late-{server}-{name}", 24, first)
        figures[name] = {k: sum(s[k] for s in served) for k in ("series_requests", "series_bytes")}
    base = figures["punctual"]
    for f in figures.values():
        f["bytes_ratio"] = round(f["series_bytes"] / base["series_bytes"], 3)
        f["requests_ratio"] = round(f["series_requests"] / base["series_requests"], 3)
    return figures


def floor(server: str, runner: Runner) -> dict[str, Any]:
    first = START + DAY_MS + 13 * HOUR_MS + 7 * MINUTE_MS  # 12 runs from 14:07 to 01:07: one across midnight
    if server == "emulator":
        platform: Platform = EmulatorPlatform(runner.workdir, emulator_fleet(first, 125, 6, 2, {}))
    else:
        platform = LivePlatform(runner.workdir, first, None, objects=125, params=1000, seed=1)
    hours = 12
    with platform:
        served = _hourly(platform, runner, f"floor-{server}", hours, first)
    floor_ = hours * (3 * 1000 + 2)
    requests = sum(s["requests"] for s in served)
    by_purpose: dict[str, int] = {}
    for summary in runner.summaries[-hours:]:
        for k, v in (summary.get("requests_by_purpose") or {}).items():
            by_purpose[k] = by_purpose.get(k, 0) + v
    return {
        "requests": requests,
        "floor": floor_,
        "ratio": round(requests / floor_, 3),
        "by_purpose": by_purpose,
    }


SCENARIOS = {"freshness": freshness, "quiet": quiet, "late": late, "floor": floor}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--servers", nargs="+", choices=["emulator", "live"], default=["emulator", "live"])
    parser.add_argument("--tree", type=Path, default=HERE.parent, help="the checkout whose etl runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"environment": environment(), "tree": str(args.tree)}
    for scenario in args.scenarios:
        for server in args.servers:
            with tempfile.TemporaryDirectory() as tmp:
                figures = SCENARIOS[scenario](server, Runner(args.tree.resolve(), Path(tmp)))
            results[f"{scenario}/{server}"] = figures
            print(f"{scenario:<10} {server:<9} {json.dumps(figures)}", flush=True)
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
