"""Sessions over a real socket: every form an ended session takes, short sessions under full concurrency,
a right that is really missing, and the two ways of signing in."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from etl.client import MonitoringClient, RetryPolicy, SyncMonitoringClient
from etl.errors import AuthError, ConfigError, RetriesExhausted
from etl.timeutil import DAY_MS
from etl_emulator.faults import SESSION_ENDS
from tests.support.checks import assert_exact
from tests.support.cli import connection_env, etl
from tests.support.client import FAST, client_for
from tests.support.configs import make_config
from tests.support.credentials import PASSWORD, USERS, etl_user_config, leaks
from tests.support.emulator import T0, emulator_config
from tests.support.pipeline import run


def logins(emulator) -> list[dict]:
    return [r for r in emulator.requests() if r["path"].endswith("/auth/login")]


def etl_api(*args: str, base_url: str, username: str, password: str) -> subprocess.CompletedProcess:
    """`etl api ARGS` in a child process, its connection from the ETL_* variables."""
    return etl("api", *args, password=None, env=connection_env(base_url, username, password))


@pytest.mark.parametrize("session_max_requests", [5, 30])
@pytest.mark.parametrize("session_end", SESSION_ENDS)
def test_short_sessions_in_every_form_cost_only_re_sign_ins(
    fresh_emulator, tmp_path, session_end, session_max_requests
):
    """Sessions ending every few requests, answered 401, 403, a redirect or a sign-in page, with 16 requests
    in flight: the run is exact and ok, and each ended session cost one sign-in."""
    fresh_emulator.set_faults(session_end=session_end, session_max_requests=session_max_requests)
    # A small count makes ~250 requests, so that sessions of 30 end too.
    config = make_config(fresh_emulator.base_url, tmp_path, extract={"concurrency": 16, "max_points": 100})
    summary = run(config).as_dict()
    assert_exact(tmp_path)
    assert summary["status"] == "ok" and summary["failed_window_count"] == 0
    assert summary["relogins"] == len(logins(fresh_emulator)) - 1 > 0
    assert summary["requests"] == len(fresh_emulator.requests())
    if session_max_requests >= 30:
        assert summary["retries"] == 0  # at 5 a request may, rarely, see its sessions end 24 times in a row


@pytest.mark.parametrize("session_end", ["401", "403", "302-login", "html-login"])
def test_a_missing_right_is_an_auth_error_however_sessions_end(fresh_emulator, session_end):
    """The restricted login may read but not set values (403). With sessions that end after 3 requests
    and answer 403 when they do, a real refusal is still told apart: an auth error, not retried."""
    fresh_emulator.set_faults(session_end=session_end, session_max_requests=3)
    with client_for(fresh_emulator, "restricted", "restricted") as c:
        for _ in range(4):  # a session ends on the way
            assert c.objects_short()
        with pytest.raises(AuthError, match="HTTP 403") as refused:
            c.set_value(1001, 1.0)
        assert not isinstance(refused.value, RetriesExhausted) and refused.value.exit_code == 3
        assert c.stats.relogins >= 1 and c.stats.retries.total() == 0
        assert c.objects_short()  # the client goes on working


def test_a_missing_right_through_the_cli_is_exit_3(fresh_emulator, tmp_path):
    fresh_emulator.set_faults(session_end="403", session_max_requests=4)
    result = etl_api(
        "set-value",
        "1001",
        "1",
        "--yes",
        base_url=fresh_emulator.base_url,
        username="restricted",
        password="restricted",
    )
    assert result.returncode == 3, result.stderr
    assert "lacks the right" in result.stderr


def test_a_fresh_session_is_not_suspected_for_coming_soon_after_a_sign_in(fresh_emulator):
    """Sessions that serve two requests and answer 403 after: each request is refused right after someone
    signed in, many times over; none of that is taken for a missing right."""
    fresh_emulator.set_faults(session_end="403", session_max_requests=2)

    async def go():
        async with MonitoringClient(fresh_emulator.base_url, "demo", "demo", retry=FAST) as c:
            answers = await asyncio.gather(*(c.measure_raw(1001, T0, T0 + DAY_MS) for _ in range(40)))
            return answers, c.stats

    answers, stats = asyncio.run(go())
    assert len({len(a) for a in answers}) == 1 and stats.relogins >= 19


def test_form_sign_in_sends_the_credentials_in_the_body(fresh_emulator):
    with client_for(fresh_emulator, sign_in="form") as c:
        assert c.sign_in().login == "demo"
        assert c.objects_short()
    (login,) = logins(fresh_emulator)
    assert login["method"] == "POST" and login["query"] == {} and login["status"] == 200


@pytest.mark.parametrize("sign_in, other", [("query", "form"), ("form", "query")])
def test_a_refused_sign_in_names_its_form_and_suggests_the_other(emulator, sign_in, other):
    with (
        client_for(emulator, password="wrong-password", sign_in=sign_in) as c,
        pytest.raises(AuthError) as info,
    ):
        c.objects_short()
    message = str(info.value)
    assert "sign-in refused for user 'demo' (HTTP 401)" in message
    assert ("form-encoded body" if sign_in == "form" else "query parameters") in message
    assert f"source.sign_in: {other}" in message and "wrong-password" not in message


@pytest.mark.parametrize("server_reads, client_sends", [("form", "query"), ("query", "form")])
def test_a_server_that_reads_one_form_only_is_met_by_choosing_it(
    fresh_emulator, tmp_path, server_reads, client_sends
):
    fresh_emulator.set_faults(sign_in_via=server_reads)
    with client_for(fresh_emulator, sign_in=client_sends) as c, pytest.raises(AuthError) as info:
        c.objects_short()
    assert f"source.sign_in: {server_reads}" in str(info.value)  # the hint is the way out
    summary = run(make_config(fresh_emulator.base_url, tmp_path, source={"sign_in": server_reads})).as_dict()
    assert summary["status"] == "ok"
    assert_exact(tmp_path)


def test_a_base_url_without_the_base_path_is_named_at_sign_in(emulator):
    root = emulator.base_url.removesuffix("/sem-restservices")  # the service lives under /sem-restservices
    with (
        SyncMonitoringClient(root, "demo", "demo", retry=FAST) as c,
        pytest.raises(ConfigError, match="base path"),
    ):
        c.objects_short()
    result = etl_api("objects", base_url=root, username="demo", password="demo")
    assert result.returncode == 2 and "lacks the service's base path" in result.stderr, result.stderr


def test_form_sign_in_leaks_no_secret(tmp_path):
    """--debug run signing in with a form body, sessions expiring: neither the password nor a cookie shows."""
    from urllib.parse import quote, quote_plus

    from etl_emulator.server import run_emulator

    with run_emulator(emulator_config(users=USERS)) as emu:
        emu.set_faults(session_max_requests=10)
        path = etl_user_config(emu, tmp_path, sign_in="form")
        result = etl("--debug", "run", "-c", str(path), "--json", password=PASSWORD)
        assert result.returncode == 0, result.stderr[-2000:]
        secrets = {PASSWORD, quote(PASSWORD), quote_plus(PASSWORD)}
        secrets |= set(emu.app.sessions) | {s.token for s in emu.app.sessions.values()}
        assert len(emu.app.sessions) > 2
        assert leaks(result.stdout + result.stderr + str(emu.requests()), secrets) == []
    assert_exact(tmp_path / "out")


def test_sessions_that_never_work_end_the_run_with_exit_3(fresh_emulator):
    """A server that signs in but refuses every session: an auth error once retries run out."""
    fresh_emulator.set_faults(session_max_requests=1)
    policy = RetryPolicy(attempts=2, backoff_initial=0.01, deadline=10)
    with client_for(fresh_emulator, retry=policy) as c:
        c.sign_in()
        c.objects_short()  # the session's only request
        fresh_emulator.set_faults(session_max_age=0.0)  # every later session is over at once
        with pytest.raises(RetriesExhausted, match="refused it 24 times") as info:
            c.objects_short()
    assert info.value.exit_code == 3
