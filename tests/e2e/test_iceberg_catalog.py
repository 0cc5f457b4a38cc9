"""Iceberg as a data-lake team runs it: tables on object storage (moto's S3 server) with their catalog in a
real PostgreSQL (tests/support/postgres.py), the catalog's password given through the environment and never shown."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from urllib.parse import quote

import pyarrow as pa
import pytest
from click.testing import CliRunner

from etl.cli import cli
from etl.config import parse_config
from etl.errors import ConfigError, StorageError
from etl.pipeline.build import Build
from etl.storage.atomic import Storage
from etl.timeutil import to_ms
from tests.support.configs import config_dict, write_config
from tests.support.credentials import leaks
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, SOURCE, expected_table
from tests.support.output import checkpoints
from tests.support.pipeline import run

VARIABLE = "ETL_CATALOG_PASSWORD"
MIDDLE = "2026-11-02T06:00:00Z"


def lake_config(base_url: str, bucket: str, postgres, sink: dict | None = None, **sections) -> dict:
    """Iceberg tables under {bucket}/lake, the catalog URL's password a ${VARIABLE} as users write it.
    One bucket of parameters: a commit per (series, day), which keeps the tests short."""
    iceberg = {"format": "iceberg", "catalog": postgres.url(f"${{{VARIABLE}}}"), "buckets": 1, **(sink or {})}
    return config_dict(base_url, f"{bucket}/lake", sink=iceberg, **sections)


def assert_exact(config, start: str, end: str) -> None:
    """Each series table's current snapshot holds every point of [start, end) once, read through the
    config's own catalog."""
    lake = Build(config).lake
    assert lake is not None
    for name in SERIES:
        rows = lake.series(name).dataset().to_table()
        want = expected_table(emulator_config(), name, to_ms(start), to_ms(end))
        got = pa.Table.from_arrays(
            [
                c.cast(pa.timestamp("ms", tz="UTC"))
                if pa.types.is_timestamp(c.type)
                else c.cast(pa.string())
                if pa.types.is_large_string(c.type)
                else c
                for c in rows.columns
            ],
            names=rows.column_names,
        )
        got = got.select(want.column_names).sort_by([("param_id", "ascending"), ("ts", "ascending")])
        assert got.num_rows == want.num_rows > 0, name
        assert got.equals(want), name


def secrets(postgres) -> set[str]:
    return {postgres.password, quote(postgres.password, safe="")}


def test_iceberg_on_s3_with_a_postgresql_catalog(emulator, bucket, postgres, tmp_path, monkeypatch, caplog):
    """A first run, an incremental run and `etl query`: exact, the tables' pointers in PostgreSQL and
    their files in the bucket, the catalog's password in no log line, message, summary or file."""
    caplog.set_level(logging.DEBUG)  # every library's log lines, none redacted: nobody may log it
    monkeypatch.setenv(VARIABLE, postgres.password)
    data = lake_config(emulator.base_url, bucket, postgres)
    first = run(parse_config({**data, "window": {**data["window"], "end": MIDDLE}}))
    config = parse_config(data)
    assert_exact(config, START, MIDDLE)
    Storage(
        f"{bucket}/lake"
    ).find()  # listings cached in this process, as maintenance or a reader leaves them
    second = run(config)
    assert second.as_dict()["series"]["raw"]["windows"] == 8  # only what the first run did not cover
    assert_exact(config, START, END)

    path = write_config(tmp_path / "c.yaml", data)
    sql = "select count(*) as n, count(distinct param_name) as names from raw_named"
    query = CliRunner().invoke(cli, ["query", "-c", str(path), sql])
    assert query.exit_code == 0, query.output
    want = expected_table(emulator_config(), "raw", to_ms(START), to_ms(END)).num_rows
    assert query.output.split() == ["n", "names", str(want), "8", "(1", "row)"]

    # The catalog is PostgreSQL's (the tables' metadata pointers, into the bucket); nothing is local.
    import sqlalchemy

    with sqlalchemy.create_engine(postgres.url(driver="+psycopg2")).connect() as con:
        rows = con.execute(sqlalchemy.text("select table_name, metadata_location from iceberg_tables"))
        pointers = {name: location for name, location in rows}
    assert {"raw", "average", "candles", "quality"} <= set(pointers)
    assert all(p.startswith(f"{bucket}/lake/") for p in pointers.values())
    assert not list(tmp_path.glob("**/*.db"))

    storage = Storage(bucket)
    files = storage.find()
    assert any(f.startswith("lake/_runs/") for f in files) and any(
        f.endswith(".metadata.json") for f in files
    )
    shown = [caplog.text, query.output, json.dumps(first.as_dict()), json.dumps(second.as_dict())]
    shown += [storage.read(f) or b"" for f in files]  # data, metadata, run summaries, state
    assert not [found for text in shown for found in leaks(text, secrets(postgres))]
    assert "sink.catalog holds a password" not in caplog.text  # it came from the environment


def test_a_killed_run_resumes_exactly(fresh_emulator, bucket, postgres, tmp_path, monkeypatch):
    """SIGKILL an `etl run` once its first commit is in, then run again: every point once."""
    monkeypatch.setenv(VARIABLE, postgres.password)
    data = lake_config(
        fresh_emulator.base_url, bucket, postgres, extract={"concurrency": 2}, state={"lease": "1s"}
    )
    path = write_config(tmp_path / "c.yaml", data)
    fresh_emulator.set_faults(latency=0.05)
    storage = Storage(f"{bucket}/lake")
    victim = subprocess.Popen(
        [sys.executable, "-m", "etl", "run", "-c", str(path), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not storage.find(f"_state/{SOURCE}/log"):  # a slab is committed and checkpointed
            assert victim.poll() is None and time.monotonic() < deadline, (
                victim.stderr and victim.stderr.read()
            )
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        victim.kill()
        assert victim.stderr is not None
        victim.stderr.close()
    covered = checkpoints(f"{bucket}/lake")
    assert 0 < int((covered.end - covered.start).sum()) < 8 * 3 * (to_ms(END) - to_ms(START))  # mid-way
    fresh_emulator.set_faults(reset=True)
    time.sleep(1.1)  # the dead run's lease expires
    config = parse_config(data)
    assert run(config).status == "ok"
    assert_exact(config, START, END)


def test_catalog_errors_are_one_line_without_the_password(emulator, bucket, postgres, tmp_path, monkeypatch):
    monkeypatch.setenv(VARIABLE, postgres.password)
    url = postgres.url(f"${{{VARIABLE}}}")
    wrong_port = url.replace(f":{postgres.port}/", ":1/")
    bad_port = url.replace(f":{postgres.port}/", ":port/")
    wrong_password = postgres.url("not-the-password")
    for catalog, error, message in [
        (wrong_port, StorageError, r"^cannot open the Iceberg catalog \(sql\): .*127\.0\.0\.1"),
        (
            wrong_password,
            StorageError,
            r"^cannot open the Iceberg catalog \(sql\): .*password authentication",
        ),
        (bad_port, ConfigError, r"^sink\.catalog: invalid literal"),
    ]:
        data = lake_config(emulator.base_url, bucket, postgres, sink={"catalog": catalog})
        with pytest.raises(error, match=message) as caught:
            run(parse_config(data))
        text = str(caught.value)
        assert "\n" not in text and not leaks(text, {*secrets(postgres), "not-the-password"}), text
