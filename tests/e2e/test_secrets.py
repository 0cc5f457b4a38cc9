"""Secrets and access: where the password comes from, that neither it nor a session cookie leaks
anywhere (debug logs included), nor the password echoed back by a server in any encoding, TLS
verification, and what a restricted login can export."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import duckdb
import httpx
import pytest

from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.checks import assert_exact
from tests.support.cli import etl, etl_process
from tests.support.configs import config_dict, write_config
from tests.support.credentials import PASSWORD, USERS, etl_user_config, leaks
from tests.support.emulator import START, emulator_config
from tests.support.tls import self_signed

PLAIN_WARNING = "source.password is written in the config file"


@pytest.fixture
def private_emulator() -> Iterator[RunningEmulator]:
    with run_emulator(emulator_config(users=USERS)) as running:
        yield running


# -- where the password comes from ------------------------------------------------------------------


def test_password_from_the_environment_or_a_file_works_silently(private_emulator, tmp_path):
    result = etl("plan", "-c", str(etl_user_config(private_emulator, tmp_path)), password=PASSWORD)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    secret = tmp_path / "password.txt"
    secret.write_text(PASSWORD + "\n")
    path = etl_user_config(private_emulator, tmp_path, password=None, password_file=str(secret))
    result = etl("plan", "-c", str(path), password=PASSWORD)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_plain_password_in_the_config_works_but_warns(private_emulator, tmp_path):
    result = etl(
        "plan", "-c", str(etl_user_config(private_emulator, tmp_path, password=PASSWORD)), password=PASSWORD
    )
    assert result.returncode == 0, result.stderr
    assert PLAIN_WARNING in result.stderr and PASSWORD not in result.stderr


# -- nothing leaks -----------------------------------------------------------------------------------


def test_debug_run_leaks_neither_password_nor_cookies(private_emulator, tmp_path):
    """A --debug run (httpx and etl.client.wire debug logs on) with sessions expiring every 10 requests, then a
    refused sign-in: the password (as typed and URL-encoded) and every session cookie value the server
    issued appear in no output stream, no traceback and no file of the output folder."""
    private_emulator.set_faults(session_max_requests=10)
    path = etl_user_config(private_emulator, tmp_path)
    ok = etl("--debug", "run", "-c", str(path), "--json", password=PASSWORD)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "HTTP Request: POST" in ok.stderr and "etl.client.wire: connected to" in ok.stderr  # debug logs on
    assert '"relogins": 0' not in ok.stdout
    refused = etl("--debug", "run", "-c", str(path), password=PASSWORD + "-wrong")
    assert refused.returncode == 3 and "Traceback" in refused.stderr
    sessions = private_emulator.app.sessions
    assert len(sessions) > 2
    secrets = {PASSWORD, quote(PASSWORD), quote_plus(PASSWORD), PASSWORD + "-wrong"}
    secrets |= set(sessions) | {s.token for s in sessions.values()}
    assert leaks(ok.stdout + ok.stderr + refused.stdout + refused.stderr, secrets) == []
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert any("dimensions" in p.parts for p in files) and any("_runs" in p.parts for p in files)
    assert {str(p): leaks(p.read_bytes(), secrets) for p in files if leaks(p.read_bytes(), secrets)} == {}
    assert_exact(tmp_path / "out")


# The password's encoded form in the emulator's echo of a sign-in, and how etl signs in (either way, by turns).
ECHOED = {
    "query": (r'"password":"([^"]+)"', "query"),
    "raw": (r"password=(.+)&username", "form"),
    "partial": (r"password=(.+)&username", "query"),
    "base64": (r'"message":"([^"]+)"', "form"),
    "basic": (r"Basic ([^\"]+)", "query"),
    "json-unicode": (r"password\\u003d(.+)\\u0026username", "form"),
    "html": (r"password&#61;(.+)&amp;username", "query"),
}


@pytest.fixture(scope="module")
def echoing(tmp_path_factory) -> Iterator[tuple[RunningEmulator, dict, Path]]:
    """An emulator that knows etl-user, the config of a day of its raw data into a Delta table, and the
    table's folder, written by a clean run (its files are searched with the others)."""
    out = tmp_path_factory.mktemp("echo") / "out"
    with run_emulator(emulator_config(users=USERS, objects=1)) as running:
        data = config_dict(running.base_url, out, series=["raw"], sink={"format": "delta"})
        data["source"].update(username="etl-user", password="${ETL_PASSWORD}")
        data["window"] = {"start": START, "end": "2026-11-02T00:00:00Z", "overlap": "0s"}
        data["retry"]["attempts"] = 2
        config = write_config(out.parent / "c.yaml", data)
        assert etl("run", "-c", str(config), password=PASSWORD).returncode == 0
        yield running, data, out


def fragments(text: str, size: int = 8) -> set[str]:
    """The text and every piece of it `size` characters long."""
    return {text} | {text[i : i + size] for i in range(len(text) - size + 1)}


@pytest.mark.parametrize("echo", ECHOED)
def test_a_password_a_server_echoes_in_any_encoding_appears_nowhere(echoing, echo, tmp_path):
    """Every sign-in answers 502 with the credentials it got, in one encoding: the run's stderr (--debug),
    its --json summary, its record, the metrics file, its OpenLineage events, `etl doctor --json` on that
    record and every file of the output (the Delta log included) hold no piece of the password in that
    encoding nor as typed.
    The echo reaches the error line, masked."""
    emulator, data, out = echoing
    pattern, way = ECHOED[echo]
    events = tmp_path / "lineage.jsonl"  # the run's OpenLineage events, its FAIL with the error line
    lineage = {"transport": {"type": "file", "path": str(events)}}
    config = write_config(
        tmp_path / "c.yaml", {**data, "source": {**data["source"], "sign_in": way}, "lineage": lineage}
    )
    metrics = tmp_path / "etl.prom"
    emulator.set_faults(reset=True, error_rate=1.0, echo_params=echo)
    try:
        sent, url = {"username": "etl-user", "password": PASSWORD}, emulator.base_url + "/auth/login"
        answer = httpx.post(url, data=sent) if way == "form" else httpx.post(url, params=sent)
        [echoed] = re.findall(pattern, answer.text)
        run = etl(
            "--debug", "run", "-c", str(config), "--json", "--metrics-file", str(metrics), password=PASSWORD
        )
    finally:
        emulator.set_faults(reset=True)
    doctor = etl("doctor", "-c", str(config), "--json", "--offline", password=PASSWORD)
    assert run.returncode == 5, run.stderr[-2000:]
    assert doctor.returncode == 10 and "***" in doctor.stdout, doctor.stdout  # the last run's error
    [line] = [line for line in run.stderr.splitlines() if line.startswith("etl: error: ")]
    assert "sign-in: HTTP 502" in line and "***" in line, line
    secrets = fragments(echoed) | fragments(PASSWORD) | {quote(PASSWORD), quote_plus(PASSWORD)}
    assert leaks(run.stdout + run.stderr + doctor.stdout + doctor.stderr, secrets) == []
    files = [metrics, events, *(p for p in out.rglob("*") if p.is_file())]
    assert any("_delta_log" in p.parts for p in files) and any("_runs" in p.parts for p in files)
    assert b'"eventType": "FAIL"' in events.read_bytes() and b"***" in events.read_bytes()
    assert {str(p): leaks(p.read_bytes(), secrets) for p in files if leaks(p.read_bytes(), secrets)} == {}


def test_init_and_doctor_never_show_a_password_a_server_echoes(echoing, tmp_path):
    """Their probes sign in too: each says in one line that sign-in failed, without the answer's body."""
    emulator, data, _ = echoing
    config = write_config(tmp_path / "c.yaml", data)
    emulator.set_faults(reset=True, error_rate=1.0, echo_params="raw")
    try:
        init = etl(
            "init", "--base-url", emulator.base_url, "--username", "etl-user", "--json", password=PASSWORD
        )
        doctor = etl("doctor", "-c", str(config), "--json", password=PASSWORD)
    finally:
        emulator.set_faults(reset=True)
    assert init.returncode == 5 and "sign-in" in init.stderr, init.stderr
    assert doctor.returncode == 10 and "sign-in" in doctor.stdout, doctor.stdout
    secrets = fragments(PASSWORD) | {quote(PASSWORD), quote_plus(PASSWORD)}
    assert leaks(init.stdout + init.stderr + doctor.stdout + doctor.stderr, secrets) == []


# -- TLS ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_emulator(certificate) -> Iterator[RunningEmulator]:
    cert, key = certificate
    with run_emulator(emulator_config(users=USERS, tls_cert=cert, tls_key=key)) as running:
        assert running.base_url.startswith("https://")
        yield running


def test_the_emulator_cli_serves_https(certificate):
    cert, key = certificate
    serve = ["emulator", "serve", "--port", "0", "--objects", "1", "--log-level", "warning"]
    process = etl_process(*serve, "--tls-cert", str(cert), "--tls-key", str(key), stdout=None)
    try:
        line = process.stderr.readline()
        assert "listening on https://127.0.0.1:" in line, line
        root = line.split("listening on ")[1].split("/sem-restservices")[0]
        wait = ["emulator", "wait", "--url", root, "--timeout", "10"]
        assert etl(*wait, "--ca-bundle", str(cert)).returncode == 0
        assert etl(*wait[:-1], "0.5").returncode == 1  # untrusted: no answer
    finally:
        process.terminate()
        process.wait(10)


def test_tls_is_verified_by_default(tls_emulator, tmp_path):
    tls_emulator.clear_requests()
    result = etl("run", "-c", str(etl_user_config(tls_emulator, tmp_path)), password=PASSWORD)
    assert result.returncode == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("etl: error: TLS: cannot verify the server https://"), (
        lines
    )
    assert "self-signed certificate" in lines[0] and "source.ca_bundle" in lines[0]
    assert "gave up" not in lines[0]  # not retried: a certificate does not heal
    assert tls_emulator.requests() == []  # nothing, the password least, went to an unverified server


def test_https_to_an_http_server_fails_at_once(private_emulator, tmp_path):
    """A wrong scheme is a TLS protocol error: one line, exit 4, not retried (it would fail 6 times)."""
    data = config_dict(private_emulator.base_url.replace("http://", "https://"), tmp_path / "out")
    data["source"]["password"] = "${ETL_PASSWORD}"
    result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)))
    assert result.returncode == 4, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("etl: ")]
    assert (
        line.startswith("etl: error: TLS: no TLS handshake with https://127.0.0.1:")
        and "not https://" in line
    )
    assert "gave up" not in line


def test_the_ca_bundle_is_honoured(tls_emulator, certificate, tmp_path):
    path = etl_user_config(tls_emulator, tmp_path, ca_bundle=str(certificate[0]))
    result = etl("run", "-c", str(path), password=PASSWORD)
    assert result.returncode == 0 and result.stderr.count("\n") <= 8, result.stderr  # the summary, no warning
    assert "WARNING" not in result.stderr
    assert_exact(tmp_path / "out")


def test_turning_verification_off_works_but_warns(tls_emulator, tmp_path):
    result = etl(
        "plan", "-c", str(etl_user_config(tls_emulator, tmp_path, verify_tls=False)), password=PASSWORD
    )
    assert result.returncode == 0, result.stderr
    assert "TLS certificate verification is OFF" in result.stderr


@pytest.mark.parametrize(
    "bundle, message",
    [
        ("missing.pem", "no such file"),
        ("garbage.pem", "cannot load CA certificates"),
    ],
)
def test_a_bad_ca_bundle_is_a_config_error(tls_emulator, tmp_path, bundle, message):
    (tmp_path / "garbage.pem").write_text("not a certificate")
    path = etl_user_config(tls_emulator, tmp_path, ca_bundle=str(tmp_path / bundle))
    result = etl("run", "-c", str(path), password=PASSWORD)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("etl: error: config error: source.ca_bundle") and message in result.stderr


# -- a restricted login ------------------------------------------------------------------------------


def test_restricted_login_exports_nothing_of_other_objects(tmp_path):
    """Login `restricted` sees the odd object ids (1 and 3 of 1..3): no row of any output file, series
    or dimension, names object 2, its devices (201, 202) or its parameters (2001...)."""
    with run_emulator(emulator_config(objects=3)) as emulator:
        data = config_dict(emulator.base_url, tmp_path / "out")
        data["source"].update(username="restricted", password="${ETL_PASSWORD}")
        result = etl("run", "-c", str(write_config(tmp_path / "c.yaml", data)), password="restricted")
        assert result.returncode == 0, result.stderr
        log = emulator.requests()
    assert all(r["status"] == 200 for r in log)  # it never even asked for what it may not see
    out = tmp_path / "out"
    con = duckdb.connect()
    for series in ("raw", "average", "candles"):
        ids = con.sql(
            f"select distinct object_id, param_id // 1000 from '{out}/{series}/**/*.parquet' order by 1"
        )
        assert ids.fetchall() == [(1, 1), (3, 3)], series
    checks = {
        "objects": "select distinct id from t",
        "units": "select distinct object_id from t union select distinct deviceconnect.device.id // 100 from t",
        "parameters": "select distinct object_id from t union select distinct id // 1000 from t",
        "rooms": "select distinct object_id from t",  # snake_case and typed: records are structs
        "commands": "select distinct device.id // 100 from t",
    }
    for table, sql in checks.items():
        con.sql(f"create or replace view t as select * from '{out}/dimensions/{table}/*.parquet'")
        assert sorted(con.sql(sql).fetchall()) == [(1,), (3,)], table


def test_a_username_that_contains_the_password_is_shown_whole(monkeypatch, capsys):
    """Redaction replaces the secret only: 'demo1' signing in with 'demo' is not 'user ***1'."""
    from etl.cli import main

    users = [{"login": "demo1", "password": "another", "objects": "all"}]
    with run_emulator(emulator_config(users=users)) as emulator:
        monkeypatch.setenv("ETL_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ETL_USERNAME", "demo1")
        monkeypatch.setenv("ETL_PASSWORD", "demo")
        with pytest.raises(SystemExit) as exit_info:
            main(["api", "objects"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 3 and "sign-in refused for user 'demo1'" in err, err


def test_the_databases_password_reaches_no_log_error_summary_table_or_doctor(
    emulator, postgres, tmp_path, capsys, caplog, monkeypatch
):
    """sink.format postgres: a run with the password in sink.password_file and every library's debug log
    on, `etl doctor --json`, runs refused with a wrong password (from the file, and from the environment
    into the dsn): the password, as typed and encoded, is in no stream, log line, file of the output or
    checkpoint in the database."""
    import logging

    from tests.support.cli import etl_main
    from tests.support.postgres import VARIABLE, database, sink

    caplog.set_level(logging.DEBUG)  # every library's log lines, none redacted: nobody may log it
    monkeypatch.setenv("ETL_PASSWORD", "demo")
    out = tmp_path / "out"
    keys = sink(postgres, out)
    secret = tmp_path / "pg-password"
    secret.write_text(postgres.password + "\n")
    data = config_dict(emulator.base_url, out, series=["raw"], sink=keys)
    data["window"]["end"] = "2026-11-02T00:00:00Z"
    data["source"]["password"] = "${ETL_PASSWORD}"
    from_file = {**data, "sink": {**keys, "dsn": keys["dsn"].replace(f":${{{VARIABLE}}}@", "@")}}
    from_file["sink"]["password_file"] = str(secret)
    path = write_config(tmp_path / "file.yaml", from_file)
    shown = []
    for args, code in [
        (["--debug", "run", "-c", str(path), "--json"], 0),
        (["doctor", "-c", str(path), "--json"], None),
    ]:
        done = etl_main(capsys, *args)
        assert code is None or done[0] == code, done[2]
        shown += done[1:]
    secret.write_text("wrong-pg-password")
    done = etl_main(capsys, "--debug", "run", "-c", str(path))
    assert done[0] == 7 and "password authentication failed" in done[2]
    shown += done[1:]
    monkeypatch.setenv(VARIABLE, "wrong-pg-password")
    done = etl_main(capsys, "run", "-c", str(write_config(tmp_path / "env.yaml", data)))
    assert done[0] == 7, done[2]
    shown += [*done[1:], caplog.text]
    secrets = {postgres.password, quote(postgres.password, safe=""), quote_plus(postgres.password)}
    secrets.add("wrong-pg-password")
    assert leaks("".join(shown), secrets) == []
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any("_runs" in p.parts for p in files) and any("_state" in p.parts for p in files)
    assert {str(p): leaks(p.read_bytes(), secrets) for p in files if leaks(p.read_bytes(), secrets)} == {}
    db = database(out)
    stored = db.rows(f'select checkpoint, run from "{keys["schema"]}"._etl_commits')  # type: ignore[attr-defined]
    assert stored and leaks(repr(stored), secrets) == []
    db.close()  # type: ignore[attr-defined]
