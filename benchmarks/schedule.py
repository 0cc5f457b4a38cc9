"""`make bench-schedule`: `etl run` as a scheduler starts it, every hour, into each sink format.

    python benchmarks/schedule.py [--runs 200] [--formats parquet delta iceberg postgres] [--quick] [--json PATH]

One emulator process (fixed clock, 24 parameters sampled every 10 s to 1 min) serves every run. Per
format, a first run covers one day, then each run moves `--to` (the window's end) one hour later, with
the default config and no maintenance command in between: what cron or Airflow does for months. The
formats alternate run by run (hour k of Parquet, then of Delta, then of Iceberg), so a busy spell on the
machine hits all alike. Each run is its own process, measured from outside (CPU, wall, peak RSS).

Printed per format: the median CPU and wall of the first and the last 10 runs (run 0, the whole first
day, aside), data files per day partition of each series table's current snapshot (the most and the
mean), the bytes that are not data (table logs, manifests and metadata, checkpoints, run summaries),
peak RSS, and whether the output is exact: equal, row for row, to one run over the whole span into a
fresh folder. PostgreSQL's tables go to a throwaway cluster of Debian's PostgreSQL (tests/support/postgres.py,
durability off), a schema per format; their non-data bytes are the checkpoint table's, beside the
checkpoint folder and run summaries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import yaml

from etl.model import QUALITY, QUALITY_SCHEMA, SCHEMAS, Series
from etl.timeutil import DAY_MS, HOUR_MS, iso, to_ms
from harness import PY, SERIES, Emulator, environment, run_child

START = "2026-11-01T00:00:00Z"
FORMATS = ("parquet", "delta", "iceberg", "postgres")
DEFAULT_FORMATS = ["parquet", "delta", "iceberg"]  # postgres when asked: it starts a PostgreSQL
DATABASE: list[str] = []  # the PostgreSQL cluster's URL, once started
TARGETS = {"cpu_growth": 1.2, "non_data_mb": 16.0}
EDGE = 10  # runs at each end whose medians are compared


@dataclass
class Run:
    hour: int  # hours after the first day
    cpu_seconds: float
    wall: float
    seconds: float  # sign-in to the last write, as the run reports it
    peak_rss_mb: float
    windows: int
    points: int


@dataclass
class Format:
    name: str
    runs: list[Run] = field(default_factory=list)
    files_per_partition_max: int = 0
    files_per_partition_mean: float = 0.0
    partitions: int = 0
    data_files_on_disk: int = 0
    files_on_disk: int = 0
    non_data_bytes: int = 0
    non_data_by_kind: dict[str, int] = field(default_factory=dict)
    exact: bool = False
    exact_detail: str = ""


def write_config(path: Path, emulator: Emulator, out: Path, fmt: str) -> Path:
    """The default config, as a user starts with: all series, dimension tables, 1 h overlap."""
    sink = {"format": fmt, "path": str(out)}
    if fmt == "postgres":
        sink |= {"dsn": DATABASE[0], "schema": out.name}
    config = {
        "source": {"base_url": emulator.base_url, "username": "demo", "password": "${ETL_PASSWORD}"},
        "window": {"start": START},
        "sink": sink,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def run_once(config: Path, end: int, hour: int) -> Run:
    summary, usage = run_child(
        [PY, "-m", "etl", "run", "-c", str(config), "--to", iso(end), "--json", "--no-progress"]
    )
    series = summary.get("series", {})
    return Run(
        hour,
        usage["cpu_seconds"],
        usage["wall"],
        summary["seconds"],
        usage["peak_rss_mb"],
        sum(s.get("windows", 0) for s in series.values()),
        sum(s.get("points", 0) for s in series.values()),
    )


# -- what a format's output holds ------------------------------------------------------------------


def _lake(out: Path, fmt: str):
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage
    from etl.storage.postgres import Database

    if fmt == "postgres":
        sink = SinkConfig.model_validate(
            {"format": fmt, "path": str(out), "dsn": DATABASE[0], "schema": out.name}
        )
        return Lake(sink, Storage(str(out)), Database(DATABASE[0], out.name))
    return Lake(SinkConfig(format=fmt, path=str(out)), Storage(str(out)))


def partition_files(out: Path, fmt: str) -> Counter:
    """Data files of each (series, day partition) in the current snapshot of each series table."""
    counts: Counter = Counter()
    for series in SERIES:
        if fmt == "parquet":
            for path in (out / series).rglob("*.parquet"):
                if not path.name.startswith("."):
                    day = next(p for p in path.relative_to(out).parts if p.startswith("date="))
                    counts[(series, day)] += 1
            continue
        table = _lake(out, fmt).series(series)
        if not table.exists():
            continue
        for day in table.files_per_day().items():
            counts[(series, day[0])] += day[1]
    return counts


def disk(out: Path, fmt: str) -> tuple[int, int, int, dict[str, int]]:
    """Files on disk, data files among them, and the bytes of everything else by kind."""
    files = data = 0
    kinds: Counter = Counter()
    for path in out.rglob("*"):
        if not path.is_file():
            continue
        files += 1
        parts = path.relative_to(out).parts
        size = path.stat().st_size
        data_file = path.suffix == ".parquet" and not {"_delta_log", "metadata", "_state", "_runs"} & set(
            parts
        )
        if data_file:
            data += 1
            continue
        kind = (
            "state"
            if parts[0] == "_state"
            else "run summaries"
            if parts[0] == "_runs"
            else "delta log"
            if "_delta_log" in parts
            else "iceberg metadata"
            if "metadata" in parts or path.name == "catalog.db"
            else "other"
        )
        kinds[kind] += size
    if fmt == "postgres":
        from etl.storage.postgres import Database

        database = Database(DATABASE[0], out.name)
        kinds["checkpoint table"] = int(
            database.rows("select pg_total_relation_size($1::regclass)", (f'"{out.name}"._etl_commits',))[0][
                0
            ]
        )
        database.close()
    return files, data, sum(kinds.values()), dict(kinds)


def rows(out: Path, fmt: str, name: str) -> pa.Table:
    """A series (or the quality dataset) as the output schema, sorted: comparable across formats."""
    schema = QUALITY_SCHEMA if name == QUALITY else SCHEMAS[Series(name)]
    key = "day" if name == QUALITY else "ts"
    if fmt == "parquet":
        table = ds.dataset(out / name, format="parquet", partitioning="hive").to_table()
    else:
        lake = _lake(out, fmt)
        found = lake.quality() if name == QUALITY else lake.series(name)
        table = found.dataset().to_table() if found.exists() else schema.empty_table()
    columns = [table.column(f.name).cast(f.type) for f in schema]
    table = pa.Table.from_arrays(columns, schema=schema)
    return table.sort_by([("param_id", "ascending"), (key, "ascending")])


def exact(out: Path, fmt: str, clean: Path) -> tuple[bool, str]:
    """Every series and the quality rows equal those of one clean run over the whole span."""
    for name in (*SERIES, QUALITY):
        got, want = rows(out, fmt, name), rows(clean, "parquet", name)
        if not got.equals(want):
            return False, f"{name}: {got.num_rows:,} rows, one clean run writes {want.num_rows:,}"
    return True, "equal to one clean run, row for row"


# -- the report ------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def edges(runs: list[Run], n: int) -> tuple[list[Run], list[Run]]:
    """The first and last n hourly runs (run 0, the whole first day, is not an hourly run)."""
    hourly = [r for r in runs if r.hour > 0]
    n = max(1, min(n, len(hourly) // 2))
    return hourly[:n], hourly[-n:]


def report(formats: dict[str, Format], edge: int) -> tuple[list[str], dict]:
    lines = [
        f"{'format':<8} {'runs':>5} {'CPU s first -> last (median)':>30} {'wall s first -> last':>22} "
        f"{'files/day max (mean)':>20} {'non-data MB':>11} {'peak RSS MB':>16} exact"
    ]
    doc: dict = {}
    for name, f in formats.items():
        first, last = edges(f.runs, edge)
        cpu = (_median([r.cpu_seconds for r in first]), _median([r.cpu_seconds for r in last]))
        wall = (_median([r.wall for r in first]), _median([r.wall for r in last]))
        rss = (_median([r.peak_rss_mb for r in first]), _median([r.peak_rss_mb for r in last]))
        peak = max(r.peak_rss_mb for r in f.runs)
        lines.append(
            f"{name:<8} {len(f.runs):>5} {cpu[0]:>10.2f} -> {cpu[1]:.2f} (x{cpu[1] / cpu[0]:.2f})".ljust(47)
            + f" {wall[0]:>8.2f} -> {wall[1]:.2f}".ljust(23)
            + f" {f.files_per_partition_max:>8} ({f.files_per_partition_mean:.1f})".ljust(21)
            + f" {f.non_data_bytes / 1e6:>11.2f}"
            + f" {rss[0]:>5.0f} -> {rss[1]:.0f} ({peak:.0f})".rjust(17)
            + f" {'yes' if f.exact else 'NO: ' + f.exact_detail}"
        )
        doc[name] = {
            **asdict(f),
            "first": {"cpu_seconds": cpu[0], "wall": wall[0], "peak_rss_mb": rss[0], "runs": len(first)},
            "last": {"cpu_seconds": cpu[1], "wall": wall[1], "peak_rss_mb": rss[1], "runs": len(last)},
            "cpu_growth": cpu[1] / cpu[0],
            "peak_rss_mb": peak,
            "run0": asdict(f.runs[0]),
        }
    return lines, doc


def targets(doc: dict, buckets: int) -> dict[str, tuple[bool, str]]:
    out = {}
    limit = 2 * buckets + 4
    for name, f in doc.items():
        growth = f["cpu_growth"]
        out[f"{name}_cpu_growth"] = (
            growth <= TARGETS["cpu_growth"],
            f"last {f['last']['runs']} runs' median CPU x{growth:.2f} the first {f['first']['runs']}' (<= x1.2)",
        )
        out[f"{name}_files"] = (
            f["files_per_partition_max"] <= limit,
            f"at most {f['files_per_partition_max']} data files per day partition (<= 2 x buckets + 4 = {limit})",
        )
        mb = f["non_data_bytes"] / 1e6
        out[f"{name}_non_data"] = (mb < TARGETS["non_data_mb"], f"{mb:.2f} MB that is not data (< 16 MB)")
        out[f"{name}_exact"] = (f["exact"], f["exact_detail"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="hourly runs per format after the first day")
    parser.add_argument("--formats", nargs="+", default=DEFAULT_FORMATS, choices=FORMATS)
    parser.add_argument(
        "--quick", action="store_true", help="2 hourly runs of 8 parameters: checks the script"
    )
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "schedule.json")
    parser.add_argument("--keep", type=Path, help="keep the outputs in this folder")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped: the emulator is stopped too
    os.environ["ETL_PASSWORD"] = "demo"
    runs = 2 if args.quick else args.runs
    edge = 1 if args.quick else EDGE
    objects, physical, calculated = (2, 3, 1) if args.quick else (3, 6, 2)
    start = to_ms(START)
    final = start + DAY_MS + runs * HOUR_MS
    doc: dict = {"environment": environment(), "runs": runs}
    env = doc["environment"]
    print(
        f"environment: Python {env['python']} on {env['machine']}, {env['cores']} cores, "
        f"load average {env['load_average_start']}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="etl-schedule-", dir=args.keep))
    with ExitStack() as stack:
        if "postgres" in args.formats:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' cluster
            from tests.support.postgres import running_postgres

            DATABASE.append(stack.enter_context(running_postgres()).url())
        return schedule(args, doc, workdir, runs, edge, objects, physical, calculated, start, final)


def schedule(
    args: argparse.Namespace,
    doc: dict,
    workdir: Path,
    runs: int,
    edge: int,
    objects: int,
    physical: int,
    calculated: int,
    start: int,
    final: int,
) -> int:
    emulator = Emulator(
        workdir,
        "emulator",
        [
            "--objects",
            str(objects),
            "--params-per-object",
            str(physical),
            "--calc-per-object",
            str(calculated),
            "--period-range",
            "10:60",
            "--now",
            iso(final + DAY_MS),
        ],
    )
    parameters = objects * (physical + calculated)
    print(
        f"{parameters} parameters; per format: one run over {START[:10]}, then {runs} runs each one hour "
        f"later (to {iso(final)}), default config, no maintenance command"
    )
    formats = {fmt: Format(fmt) for fmt in args.formats}
    configs = {fmt: write_config(workdir / f"{fmt}.yaml", emulator, workdir / fmt, fmt) for fmt in formats}
    try:
        for hour in range(runs + 1):
            end = start + DAY_MS + hour * HOUR_MS
            for fmt, f in formats.items():
                f.runs.append(run_once(configs[fmt], end, hour))
            if hour % 10 == 0 or hour == runs:
                print(
                    f"  run {hour:>4} to {iso(end)}: "
                    + ", ".join(f"{fmt} {f.runs[-1].cpu_seconds:.2f} s CPU" for fmt, f in formats.items()),
                    flush=True,
                )
        clean_config = write_config(workdir / "clean.yaml", emulator, workdir / "clean", "parquet")
        run_once(clean_config, final, runs)
    finally:
        emulator.stop()
    from etl.sinks.layout import LEGACY_BUCKETS

    buckets = LEGACY_BUCKETS  # the lake tables' (a Parquet dataset of this fleet has 1: fewer files)
    for fmt, f in formats.items():
        out = workdir / fmt
        counts = partition_files(out, fmt)
        f.partitions = len(counts)
        f.files_per_partition_max = max(counts.values(), default=0)
        f.files_per_partition_mean = sum(counts.values()) / max(1, len(counts))
        f.files_on_disk, f.data_files_on_disk, f.non_data_bytes, f.non_data_by_kind = disk(out, fmt)
        f.exact, f.exact_detail = exact(out, fmt, workdir / "clean")
    lines, doc["formats"] = report(formats, edge)
    print("\n".join(lines))
    for fmt, f in formats.items():
        kinds = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sorted(f.non_data_by_kind.items()))
        print(
            f"{fmt:<8} {f.files_on_disk:,} files on disk ({f.data_files_on_disk:,} data files), "
            f"{f.partitions} (series, day) partitions; not data: {kinds}"
        )
    doc["environment"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["targets"] = checks = targets(doc["formats"], buckets)
    for name, (ok, text) in checks.items():
        print(f"target {name:<20} {'PASS' if ok else 'MISS'}  {text}")
    print(f"load average at the end: {doc['environment']['load_average_end']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print(f"results: {args.json}")
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
