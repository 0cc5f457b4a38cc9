"""PostgreSQL tables (sink.format postgres) against the emulator and a real PostgreSQL (the session's
throwaway cluster, a schema per test): exact runs, the tables as users query them, SIGKILLs at random
moments, two sources and three shards at once, the advisory lock, and connection errors in one line."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pytest

from etl import read as etl_read
from etl.config import parse_config
from etl.model import Shard
from etl.storage.postgres import Database, lock_key
from etl.timeutil import to_ms
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.cli import etl, etl_main, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.credentials import leaks
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, SOURCE, expected_table
from tests.support.kills import kill_when, spools_of
from tests.support.output import read, read_quality
from tests.support.pipeline import run
from tests.support.postgres import database, sink

MIDDLE = "2026-11-02T06:00:00Z"
DAY_END = "2026-11-02T00:00:00Z"


def pg_config(emulator: RunningEmulator, postgres, out: Path, **sections) -> dict:
    keys = sections.pop("sink", {})
    return config_dict(emulator.base_url, out, sink=sink(postgres, out, **keys), **sections)


def assert_exact(out: Path, start: str = START, end: str = END, settings=None, source: str = SOURCE) -> None:
    """Each series table holds every point of [start, end) once (read back through ADBC, as etl reads)."""
    for name in SERIES:
        want = expected_table(settings or emulator_config(), name, to_ms(start), to_ms(end), source=source)
        got = read(out, name)
        assert got.num_rows == want.num_rows > 0, (name, got.num_rows, want.num_rows)
        assert got.select(want.column_names).equals(want), name


def test_runs_are_exact_and_read_as_the_other_sinks(emulator, postgres, tmp_path, capsys):
    """A first and an incremental run: exact; the tables, partitions, index and raw_named view as
    users query them in PostgreSQL; etl.read, etl query, etl report and etl state on top."""
    out = tmp_path / "out"
    data = pg_config(emulator, postgres, out)
    first = run(parse_config({**data, "window": {**data["window"], "end": MIDDLE}}))
    assert_exact(out, START, MIDDLE)
    config = parse_config(data)
    second = run(config)
    assert second.as_dict()["series"]["raw"]["windows"] == 8  # what the first run left
    assert_exact(out)
    assert first.lake_commits and second.lake_commits

    db = database(out)
    schema = data["sink"]["schema"]
    rows = db.rows(  # type: ignore[attr-defined]
        "select c.relname, c.relkind from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = $1",
        (schema,),
    )
    kinds = {str(name): str(kind) for name, kind in rows}
    assert {kinds[t] for t in ("raw", "average", "candles", "quality")} == {"p"}  # partitioned
    assert kinds["raw_20261101"] == kinds["raw_20261102"] == "r"
    assert kinds["raw_20261109"] == "r"  # made ahead of the newest day
    assert kinds["raw_named"] == "v" and kinds["raw_param_time"] == "I"  # the partitioned index
    assert {"objects", "parameters", "units"} <= set(kinds)
    types = dict(
        db.rows(  # type: ignore[attr-defined]
            "select column_name, data_type from information_schema.columns where table_schema = $1 "
            "and table_name = 'raw'",
            (schema,),
        )
    )
    assert types["ts"] == "timestamp with time zone" and types["value"] == "double precision"
    named = db.rows(  # type: ignore[attr-defined]
        f'select count(*), count(distinct param_name), count(unit) from "{schema}".raw_named'
    )[0]
    want = expected_table(emulator_config(), "raw", to_ms(START), to_ms(END)).num_rows
    assert named == (want, 8, want)

    # The same frames as a Parquet run's, named or not, filtered or not.
    parquet = parse_config(config_dict(emulator.base_url, tmp_path / "parquet"))
    run(parquet)
    for series, options in [
        ("raw", {"named": True}),
        ("average", {"start": "2026-11-01T12:00:00Z", "params": [1001, 2002]}),
        ("candles", {}),
        ("quality", {}),
    ]:
        got, expected = etl_read(config, series, **options), etl_read(parquet, series, **options)
        assert list(got.columns) == list(expected.columns), series
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, check_like=False)

    path = write_config(tmp_path / "c.yaml", data)
    sql = "select count(*) as n from raw_named where unit is not null"
    code, stdout, stderr = etl_main(capsys, "query", "-c", str(path), sql)
    assert code == 0 and stdout.split()[:2] == ["n", str(want)], stderr
    code, stdout, stderr = etl_main(capsys, "report", "-c", str(path), "--json")
    assert code == 0 and json.loads(stdout)["parameters"] == 8, stderr
    code, stdout, stderr = etl_main(capsys, "state", "show", "-c", str(path), "--json")
    assert code == 0 and len(json.loads(stdout)) == 8 * 3, stderr


def no_row_twice(out: Path, stop: threading.Event, failures: list[str]) -> None:
    """A reader that counts every table's rows against its distinct keys the whole time: a commit is
    seen whole or not at all."""
    db: Database = database(out)  # type: ignore[assignment]
    schema = db.schema
    while not stop.is_set():
        for name, key in [("raw", "ts"), ("average", "ts"), ("quality", "day")]:
            try:
                n, distinct = db.rows(
                    f'select count(*), count(distinct (source, param_id, {key})) from "{schema}".{name}'
                )[0]
            except Exception:  # noqa: BLE001 - not made yet
                continue
            if n != distinct:
                failures.append(f"{name}: {n - distinct} row(s) twice")
        time.sleep(0.01)
    db.close()


@pytest.mark.parametrize("kills", [3, pytest.param(10, marks=pytest.mark.slow)])
def test_sigkill_at_random_moments_then_rerun_is_exact(fresh_emulator, postgres, tmp_path, kills):
    """Killed while fetching, right after a table commit (before the state log holds it) and while the
    checkpoint is written, by turns (a run that finished first is followed by a --full-refresh one);
    then one run: exact, one quality row per parameter-day as a clean run makes it, no spool left. A
    reader never sees a row twice."""
    fresh_emulator.set_faults(latency=0.03)
    out = tmp_path / "out"
    data = pg_config(
        fresh_emulator,
        postgres,
        out,
        window={"end": DAY_END, "overlap": "0s"},
        extract={"concurrency": 2, "slabs_in_flight": 1},
        sink={"commit": {"slabs": 2}, "versions": 3},
    )
    data["source"]["password"] = "${ETL_PASSWORD}"
    path = write_config(tmp_path / "c.yaml", data)
    db: Database = database(out)  # type: ignore[assignment]
    rnd = random.Random(5)

    def commits() -> int:
        try:
            return int(db.rows(f'select count(*) from "{db.schema}"._etl_commits')[0][0])
        except Exception:  # noqa: BLE001 - not made yet
            return 0

    def fetching():
        n = rnd.randint(1, 30)
        return lambda: sum("interval_ms" in r for r in fresh_emulator.requests()) >= n

    def committing():
        before = commits()
        return lambda: commits() > before

    def checkpointing():
        state = out / "_state" / SOURCE
        return lambda: any(p.name.startswith(".") for p in state.rglob("*"))

    stop, failures = threading.Event(), []
    reader = threading.Thread(target=no_row_twice, args=(out, stop, failures), daemon=True)
    reader.start()
    killed, hit = [], []
    phases = [("fetching", fetching), ("committing", committing), ("checkpointing", checkpointing)]
    refresh = False
    try:
        for i in range(4 * kills):
            if len(hit) >= kills:
                break
            name, moment = phases[i % len(phases)]
            fresh_emulator.clear_requests()
            proc = etl_process(
                "run", "-c", str(path), "--no-progress", *(["--full-refresh"] if refresh else [])
            )
            if kill_when(proc, moment()):
                hit.append(name)
                killed.append(proc.pid)
                refresh = False
            else:
                assert proc.returncode == 0, proc.stderr.read()
                refresh = True
            proc.stdout.close()
            proc.stderr.close()
        final = etl("run", "-c", str(path), "--json")
        assert final.returncode == 0, final.stderr
    finally:
        stop.set()
        reader.join(10)
        db.close()
    assert not failures, failures[:3]
    assert "committing" in hit, hit
    assert_exact(out, START, DAY_END)
    assert spools_of(killed) == []
    quality = read_quality(out)
    keys = list(zip(quality.column("param_id").to_pylist(), quality.column("day").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == 8
    fresh_emulator.set_faults(reset=True)
    clean = tmp_path / "clean"
    window = {"start": START, "end": DAY_END}
    run(parse_config(config_dict(fresh_emulator.base_url, clean, series=["raw"], window=window)))
    assert quality.equals(read_quality(clean))


PLANTS = {"plant-a": 7, "plant-b": 8}  # source name -> its emulator's seed: other values, the same ids


def test_two_sources_and_three_shards_at_once(postgres, tmp_path):
    """Two platforms with the same parameter ids, each split in three shards, six runs at once into the
    same tables (each under its own advisory lock): each source's rows exact, quality rows included."""
    out = tmp_path / "out"
    keys = sink(postgres, out, commit={"slabs": 1})
    with (
        run_emulator(emulator_config(seed=PLANTS["plant-a"])) as a,
        run_emulator(emulator_config(seed=PLANTS["plant-b"])) as b,
    ):
        configs = {
            name: parse_config(
                config_dict(
                    e.base_url,
                    out,
                    source={"name": name},
                    window={"start": START, "end": DAY_END, "overlap": "0s"},
                    extract={"concurrency": 2},
                    sink=keys,
                )
            )
            for name, e in (("plant-a", a), ("plant-b", b))
        }
        errors: list[BaseException] = []

        def one(name: str, shard: int) -> None:
            try:
                assert run(configs[name], shard=Shard(shard, 3)).status == "ok"
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(n, i)) for n in PLANTS for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not errors, errors
    quality = read_quality(out)
    for series in SERIES:
        got, total = read(out, series), 0
        for name, seed in PLANTS.items():
            want = expected_table(
                emulator_config(seed=seed), series, to_ms(START), to_ms(DAY_END), source=name
            )
            mine = got.filter(pc.equal(got.column("source"), name))
            assert mine.num_rows == want.num_rows > 0, (series, name)
            assert mine.select(want.column_names).equals(want), (series, name)
            total += want.num_rows
        assert got.num_rows == total, series
    assert quality.num_rows == 8 * 2
    assert pc.count_distinct(quality.column("param_id")).as_py() == 8


def test_the_advisory_lock_keeps_a_second_run_out(emulator, postgres, tmp_path, capsys):
    """A session holding the run's advisory lock (a run on another machine, whose checkpoint folder is
    not this one) refuses the run and etl state reset with exit 8, naming it; a run into other tables
    than its checkpoints' stops with exit 2."""
    out = tmp_path / "out"
    data = pg_config(emulator, postgres, out)
    path = write_config(tmp_path / "c.yaml", data)
    other = database(out)
    assert other.try_lock(lock_key(f"{data['sink']['schema']}/etl-{SOURCE}"))  # type: ignore[attr-defined]
    try:
        for args in (["run", "-c", str(path)], ["state", "reset", "-c", str(path), "--yes"]):
            code, _, stderr = etl_main(capsys, *args)
            assert code == 8, stderr
            assert "another run holds the PostgreSQL advisory lock" in stderr
            assert "etl pid" in stderr  # the holder's application name
    finally:
        other.close()  # type: ignore[attr-defined]
    assert etl_main(capsys, "run", "-c", str(path))[0] == 0
    # The checkpoints are of these tables: a run into another schema (or database) would miss the rows.
    data["sink"]["schema"] = "elsewhere"
    code, _, stderr = etl_main(capsys, "run", "-c", str(write_config(tmp_path / "c.yaml", data)))
    assert code == 2 and "sink.dsn: the checkpoints" in stderr and "schema elsewhere" in stderr, stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda url, port: url.replace(f":{port}/", ":port/"), "invalid integer value"),
        (lambda url, port: url.replace(f":{port}/", ":1/"), "Connection refused"),
        (lambda url, port: url.replace("${ETL_PG_PASSWORD}", "not-the-password"), "password authentication"),
        (lambda url, port: url.rsplit("/", 1)[0] + "/nowhere", 'database "nowhere" does not exist'),
    ],
    ids=["bad-dsn", "refused-connection", "refused-password", "missing-database"],
)
def test_connection_errors_are_one_line_and_exit_7(emulator, postgres, tmp_path, capsys, change, message):
    out = tmp_path / "out"
    data = pg_config(emulator, postgres, out)
    data["sink"]["dsn"] = change(data["sink"]["dsn"], postgres.port)
    path = write_config(tmp_path / "c.yaml", data)
    code, stdout, stderr = etl_main(capsys, "run", "-c", str(path))
    assert code == 7, stderr
    line = stderr.strip()
    assert "\n" not in line and message in line and line.startswith("etl: error: PostgreSQL etl@127.0.0.1"), (
        line
    )
    assert not leaks(stderr + stdout, {postgres.password, "not-the-password"})
