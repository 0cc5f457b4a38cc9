"""`make bench-postgres`: loading PostgreSQL, and an `etl run` into it beside one into Parquet.

    python benchmarks/postgres.py [--rows 1000000] [--groups 16] [--repeat 5] [--json PATH]

A throwaway cluster of Debian's PostgreSQL (tests/support/postgres.py: loopback, durability off, as the
tests run it) takes the same Arrow batches of raw rows (one commit group each, a day partition per
group) from each contender in turn, A then B then C, `--repeat` times, into empty tables:

- adbc-bare: ADBC's driver, `adbc_ingest` (binary COPY) of each batch and a commit, nothing else;
- adbc-etl: etl's own commit (etl/sinks/lake/postgres.py) of each batch: the day partitions, the DELETE of
  what its windows cover, the binary COPY, the checkpoint row, one transaction per group;
- psycopg-bare: psycopg 3's binary COPY of the same rows (`write_row`, typed), a commit per batch.

Printed: the median rows per second of each and etl's against the bare COPY of its own driver (the
target: 0.8 at least). Then `etl run` of 48 parameters over 7 days into PostgreSQL and into Parquet,
alternating, each in its own process: wall, CPU and peak RSS (medians).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from etl.model import Series, Windows  # noqa: E402
from etl.sinks.lake.common import Policy, Replace, with_date  # noqa: E402
from etl.sinks.lake.postgres import PostgresTable  # noqa: E402
from etl.storage.postgres import Database, quoted  # noqa: E402
from etl.timeutil import DAY_MS, to_ms  # noqa: E402
from harness import PY, Emulator, environment, run_child, save  # noqa: E402
from tests.support.postgres import running_postgres  # noqa: E402

START = to_ms("2026-11-01T00:00:00Z")
SOURCE = "bench"


def batches(rows: int, groups: int) -> list[tuple[pa.Table, Windows]]:
    """`groups` batches of raw rows as a commit group holds them (timestamps in us, the date column), each
    one day of 50 parameters, and the windows they fill."""
    per = rows // groups
    params = 50
    out = []
    for g in range(groups):
        day = START + g * DAY_MS
        pid = np.repeat(np.arange(1, params + 1, dtype=np.int64), per // params)
        step = DAY_MS // (per // params)
        ts = day + np.tile(np.arange(per // params, dtype=np.int64) * step, params)
        table = pa.table(
            {
                "source": pa.array([SOURCE] * len(pid)),
                "object_id": pa.array(pid // 10),
                "param_id": pa.array(pid),
                "kind": pa.array(["physical"] * len(pid)),
                "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                "value": pa.array(np.random.default_rng(g).random(len(pid))),
            }
        )
        ids = np.arange(1, params + 1, dtype=np.int64)
        windows = Windows(
            Series.RAW,
            ids,
            ids // 10,
            np.zeros(params, np.int64),
            np.full(params, day),
            np.full(params, day + DAY_MS),
        )
        out.append((with_date(table, "ts"), windows))
    return out


def fresh(db: Database, name: str, schema: pa.Schema) -> None:
    """An empty table `name` of these columns, partitioned by day and indexed as etl makes it."""
    with db.transaction() as cursor:
        cursor.execute(f"drop table if exists {quoted(db.schema, name)} cascade")
        cursor.execute(f"drop table if exists {quoted(db.schema, '_etl_commits')}")
    table = PostgresTable(db, name, "ts", Policy())
    table.prepare(schema)


def adbc_bare(db: Database, data: list[tuple[pa.Table, Windows]]) -> float:
    fresh(db, "bare", data[0][0].schema)
    PostgresTable(db, "bare", "ts", Policy())._partitions(  # the same partitions, made before the clock
        {START // DAY_MS + g for g in range(len(data))}
    )
    started = time.perf_counter()
    for rows, _ in data:
        with db.transaction() as cursor:
            cursor.adbc_ingest("bare", rows, mode="append", db_schema_name=db.schema)
    return time.perf_counter() - started


def adbc_etl(db: Database, data: list[tuple[pa.Table, Windows]]) -> float:
    fresh(db, "raw", data[0][0].schema)
    table = PostgresTable(db, "raw", "ts", Policy())
    started = time.perf_counter()
    for rows, windows in data:
        table.commit(rows, Replace.of(SOURCE, windows), ("etl-bench", "run", windows))
    return time.perf_counter() - started


def psycopg_bare(db: Database, url: str, data: list[tuple[pa.Table, Windows]]) -> float:
    import psycopg

    fresh(db, "bare", data[0][0].schema)
    PostgresTable(db, "bare", "ts", Policy())._partitions({START // DAY_MS + g for g in range(len(data))})
    types = ["text", "int8", "int8", "text", "timestamptz", "float8", "date"]
    started = time.perf_counter()
    with psycopg.connect(url) as con:
        for rows, _ in data:
            columns = [c.to_pylist() for c in rows.columns]
            with (
                con.cursor() as cursor,
                cursor.copy(f"copy {quoted(db.schema, 'bare')} from stdin (format binary)") as copy,
            ):
                copy.set_types(types)
                for row in zip(*columns, strict=True):
                    copy.write_row(row)
            con.commit()
    return time.perf_counter() - started


def load(args: argparse.Namespace, url: str, doc: dict) -> None:
    data = batches(args.rows, args.groups)
    total = sum(r.num_rows for r, _ in data)
    db = Database(url, "bench")
    with db.transaction() as cursor:
        cursor.execute("create schema if not exists bench")
    contenders = {
        "adbc-bare": lambda: adbc_bare(db, data),
        "adbc-etl": lambda: adbc_etl(db, data),
    }
    try:
        import psycopg  # noqa: F401

        contenders["psycopg-bare"] = lambda: psycopg_bare(db, url, data)
    except ImportError:
        print("psycopg is not installed (pip install 'etl[bench]'): psycopg-bare skipped")
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(args.repeat):
        for name, go in contenders.items():
            seconds[name].append(go())
        print(f"  round {i + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()), flush=True)
    db.close()
    rates = {name: total / statistics.median(s) for name, s in seconds.items()}
    print(f"{total:,} rows in {args.groups} groups, median of {args.repeat} alternating rounds:")
    for name, rate in rates.items():
        print(f"  {name:<13} {rate:>12,.0f} rows/s")
    ratio = rates["adbc-etl"] / rates["adbc-bare"]
    print(
        f"  etl's commit / ADBC's bare COPY: {ratio:.2f} (target >= 0.8: {'PASS' if ratio >= 0.8 else 'MISS'})"
    )
    if "psycopg-bare" in rates:
        print(f"  ADBC's bare COPY / psycopg's: {rates['adbc-bare'] / rates['psycopg-bare']:.1f}x")
    doc["load"] = {
        "rows": total,
        "groups": args.groups,
        "seconds": seconds,
        "rows_per_second": rates,
        "ratio": ratio,
    }


def runs(args: argparse.Namespace, url: str, doc: dict) -> None:
    """`etl run` of a week of 48 parameters into PostgreSQL and into Parquet, alternating."""
    workdir = Path(tempfile.mkdtemp(prefix="etl-bench-postgres-"))
    emulator = Emulator(
        workdir, "emulator", ["--objects", "6", "--params-per-object", "6", "--calc-per-object", "2"]
    )
    results: dict[str, list[dict]] = {"postgres": [], "parquet": []}
    try:
        for i in range(args.repeat):
            for fmt in results:
                out = workdir / f"{fmt}-{i}"
                sink: dict = {"format": fmt, "path": str(out)}
                if fmt == "postgres":
                    sink |= {"dsn": url, "schema": f"run{i}"}
                config = workdir / f"{fmt}.yaml"
                config.write_text(
                    yaml.safe_dump(
                        {
                            "source": {"base_url": emulator.base_url, "username": "demo", "password": "demo"},
                            "window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z"},
                            "sink": sink,
                        }
                    )
                )
                summary, usage = run_child(
                    [PY, "-m", "etl", "run", "-c", str(config), "--json", "--no-progress"]
                )
                points = sum(s["points"] for s in summary["series"].values())
                results[fmt].append({**usage, "points": points})
                shutil.rmtree(out, ignore_errors=True)
            print(
                f"  round {i + 1}: "
                + ", ".join(
                    f"{f} {r[-1]['wall']:.2f} s, {r[-1]['peak_rss_mb']:.0f} MB" for f, r in results.items()
                ),
                flush=True,
            )
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"etl run, 48 parameters x 7 days ({results['postgres'][0]['points']:,} points), medians:")
    doc["runs"] = {}
    for fmt, found in results.items():
        median = {k: statistics.median(r[k] for r in found) for k in ("wall", "cpu_seconds", "peak_rss_mb")}
        doc["runs"][fmt] = {**median, "all": found}
        print(
            f"  {fmt:<9} wall {median['wall']:.2f} s, CPU {median['cpu_seconds']:.2f} s, "
            f"peak RSS {median['peak_rss_mb']:.0f} MB"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "postgres.json")
    args = parser.parse_args()
    doc: dict = {"environment": environment()}
    env = doc["environment"]
    print(f"environment: {env['cores']} cores, load average {env['load_average_start']}")
    with running_postgres() as pg:
        url = pg.url()
        os.environ.setdefault("ETL_PASSWORD", "demo")
        load(args, url, doc)
        runs(args, url, doc)
    save(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
