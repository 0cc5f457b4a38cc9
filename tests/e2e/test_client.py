"""The client against the real emulator over a socket: every endpoint, sessions, rights, retries.
The exception tree, and a client with no server at all: tests/unit/test_errors.py."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from etl.client import ClientOptions, MonitoringClient, RetryPolicy, SyncMonitoringClient
from etl.client.models import Candles, Points
from etl.errors import AuthError, InvalidArgument, NotFound, RequestRejected, RetriesExhausted
from etl.timeutil import DAY_MS
from etl_emulator.server import run_emulator
from tests.support.client import FAST, client_for
from tests.support.emulator import T0, emulator_config


def test_every_endpoint_answers_through_the_client(emulator):
    with client_for(emulator) as c:
        user = c.sign_in()
        assert user.login == "demo"
        short = c.objects_short()
        full = c.objects()
        assert [o.id for o in short] == [o.id for o in full] == [1, 2]
        assert full[0].timezone is not None and full[0].sdirobjectstate is not None
        assert c.objects(states=[1]) == [o for o in full if o.sdirobjectstate["id"] == 1]
        one = c.object(2)
        assert one.id == 2 and one.model_extra.get("operatingMode")  # even ids carry an operating mode
        units = c.units(1)
        assert units and units[0]["deviceconnect"]["device"]["id"]
        phys = c.physical_params(1)
        calc = c.calculated_params(1)
        assert {p.kind for p in phys} == {"physical", "signal"} and {p.kind for p in calc} == {"calculated"}
        assert [p.id for p in c.physical_params(1, short=True)] == [p.id for p in phys]
        assert [p.id for p in c.calculated_params(1, short=True)] == [p.id for p in calc]
        assert [p.id for p in c.object_physical_params(1)] == [p.id for p in phys]
        assert [p.id for p in c.object_calculated_params(1)] == [p.id for p in calc]
        assert {r["id"] for r in c.object_params(1, calc=True)} == {p.id for p in phys + calc}
        pages = [c.search_params([1, 2], limit=2, offset=o) for o in range(0, 10, 2)]
        assert {r["id"] for page in pages for r in page} >= {p.id for p in phys + calc}
        analog = next(p for p in phys if p.kind == "physical")
        signal = next(p for p in phys if p.kind == "signal")
        raw = c.measure_raw(analog.id, T0, T0 + DAY_MS)
        assert isinstance(raw, Points) and len(raw) > 50 and raw.ts.dtype.kind == "i"
        avg = c.measure_average(analog.id, T0, T0 + 2 * DAY_MS)
        assert set((avg.ts % (30 * 60_000)).tolist()) == {0}
        assert (
            c.measure_average_alt(analog.id, T0, T0 + DAY_MS).ts.tolist()
            == c.measure_average(analog.id, T0, T0 + DAY_MS).ts.tolist()
        )
        candles = c.measure_candles(analog.id, T0, T0 + DAY_MS)
        assert isinstance(candles, Candles) and (candles.high >= candles.low).all()
        assert len(c.measure_candles_alt(analog.id, T0, T0 + DAY_MS)) == len(candles)
        assert len(c.calc_raw(calc[0].id, T0, T0 + DAY_MS)) > 0
        assert len(c.calc_average(calc[0].id, T0, T0 + DAY_MS)) > 0
        assert len(c.calc_candles(calc[0].id, T0, T0 + DAY_MS)) > 0
        sig = c.signal(signal.id, T0, T0 + DAY_MS)
        assert set(sig.value.tolist()) <= {0.0, 1.0}
        assert c.param_status(analog.id).statecolor in {"none", "normal", "warning", "error", "critical"}
        assert c.param_status(analog.id, at=T0).statecolor is not None
        assert c.zones() and c.classifiers() and c.room_types() and c.rooms() is not None
        device_id = units[0]["deviceconnect"]["device"]["id"]
        commands = c.ext_commands(device_id)
        assert commands and commands[0].device.id == device_id
        c.run_command(device_id, commands[0].id, "a=1&b=two words")
        assert any(r.get("commandData") == "a=1&b=two words" for r in emulator.commands())
        c.set_value(analog.id, 42.5)
        with pytest.raises(RequestRejected):
            c.set_value(signal.id, 0.5)  # signal parameters take 0 or 1 only
        with pytest.raises(NotFound):
            c.object(999)


def test_raw_window_over_24h_is_refused_before_sending(emulator):
    with client_for(emulator) as c:
        with pytest.raises(InvalidArgument, match="24 hours"):
            c.measure_raw(1001, T0, T0 + DAY_MS + 1)
        with pytest.raises(InvalidArgument, match="after its end"):
            c.measure_raw(1001, T0 + 10, T0)
        assert len(c.measure_raw(1001, T0, T0 + DAY_MS)) > 0  # exactly 24 h is allowed


def test_wrong_password_is_an_auth_error_without_the_password(emulator):
    with client_for(emulator, password="not-the-password-xyz") as c, pytest.raises(AuthError) as info:
        c.objects()
    assert "not-the-password-xyz" not in str(info.value)
    assert "demo" in str(info.value)


def test_restricted_login_sees_only_its_objects(emulator):
    with client_for(emulator, "restricted", "restricted") as c:
        assert [o.id for o in c.objects()] == [1]
        with pytest.raises(NotFound):
            c.object(2)
        with pytest.raises(NotFound):
            c.measure_raw(2001, T0, T0 + DAY_MS)
        assert all(r.get("objectId") == 1 for r in c.search_params([1, 2], limit=100))


def test_a_missing_right_is_an_auth_error_at_once(emulator):
    """403 from a fresh session is final: one re-sign-in to rule out a stale session, then no retries."""
    with client_for(emulator, "restricted", "restricted") as c:
        assert "control" not in {p["name"] for p in c.sign_in().privileges}
        with pytest.raises(AuthError, match="HTTP 403") as refused:
            c.set_value(1001, 1.0)
        assert not isinstance(refused.value, RetriesExhausted)
        assert c.stats.relogins == 1 and sum(c.stats.retries.values()) == 0


def test_password_with_special_characters_signs_in():
    password = "p&ss=w rd%+?#/é"
    users = [{"login": "odd user", "password": password, "objects": "all"}]
    with run_emulator(emulator_config(users=users)) as emu, client_for(emu, "odd user", password) as c:
        assert c.sign_in().login == "odd user"
        assert c.objects()
        logged = str(emu.requests())
        assert password not in logged and "p&ss" not in logged


def test_expired_session_signs_in_again_once_and_replays(fresh_emulator):
    fresh_emulator.set_faults(session_max_requests=3)
    with client_for(fresh_emulator) as c:
        for _ in range(10):
            assert c.objects()
        assert c.stats.relogins >= 2
        assert c.stats.retries.total() == 0  # a re-sign-in is not a retry


def test_concurrent_rejections_sign_in_once(fresh_emulator):
    async def go():
        async with MonitoringClient(fresh_emulator.base_url, "demo", "demo", retry=FAST) as c:
            await c.sign_in()
            fresh_emulator.set_faults(session_max_requests=1)
            await c.objects()  # the session is now spent
            fresh_emulator.set_faults(session_max_requests=None)
            await asyncio.gather(*(c.objects() for _ in range(8)))
            return c.stats.relogins

    assert asyncio.run(go()) == 1


@pytest.mark.parametrize("transport", ["etl", "httpx"])
@pytest.mark.parametrize(
    "faults, reason",
    [
        ({"error_rate": 0.5}, "http_5"),
        ({"rate_limit_rate": 0.5, "retry_after": 0.05}, "http_429"),
        ({"truncate_rate": 0.5}, "invalid_body"),
        ({"drop_rate": 0.5}, "connection"),
    ],
)
def test_each_fault_is_retried_and_counted(fresh_emulator, faults, reason, transport):
    """The same errors, retried the same way, through etl's transport and httpx's (source.transport)."""
    fresh_emulator.set_faults(seed=3, **faults)
    options = ClientOptions(retry=FAST, http_transport=transport)
    with SyncMonitoringClient(fresh_emulator.base_url, "demo", "demo", options=options) as c:
        c.sign_in()
        for _ in range(12):
            assert len(c.measure_raw(1001, T0, T0 + DAY_MS)) > 0
        by_reason = c.stats.as_dict()["retries_by_reason"]
    assert sum(v for k, v in by_reason.items() if k.startswith(reason)) > 0, by_reason


def test_timeouts_are_retried(fresh_emulator):
    fresh_emulator.set_faults(latency_spike_rate=0.5, latency_spike=1.0, seed=5)
    with client_for(fresh_emulator, timeout=httpx.Timeout(0.3)) as c:
        c.sign_in()
        for _ in range(6):
            c.objects()
        assert c.stats.retries["timeout"] > 0


def test_429_pauses_the_whole_client(fresh_emulator):
    fresh_emulator.set_faults(rate_limit_rate=1.0, retry_after=0.3)
    with client_for(fresh_emulator, retry=RetryPolicy(attempts=2, backoff_initial=0.01, deadline=10)) as c:
        with pytest.raises(RetriesExhausted) as info:
            c.objects()
        assert c.stats.throttled_seconds > 0 or info.value.attempts == 2
        assert info.value.exit_code == 5


def test_no_secret_in_logs_or_errors(fresh_emulator, caplog):
    from etl.support.redact import install_log_redaction

    install_log_redaction()
    caplog.set_level(logging.DEBUG)
    fresh_emulator.set_faults(session_max_requests=2)
    with client_for(fresh_emulator, password="demo") as c:
        for _ in range(4):
            c.objects()
        cookie_values = c._client.session.auth.cookie
    text = caplog.text
    assert "password=demo" not in text
    for part in cookie_values.split("; "):
        assert part.split("=", 1)[1] not in text


def test_a_request_that_succeeds_at_once_never_enters_the_retry_loop(emulator, monkeypatch):
    import etl.client.retry as retries

    def no_retry(*args, **kwargs):
        raise AssertionError("the retry loop was entered")

    monkeypatch.setattr(retries, "retry", no_retry)
    with client_for(emulator) as c:
        assert c.sign_in().login == "demo"
        assert c.objects_short() and len(c.measure_raw(1001, T0, T0 + DAY_MS)) > 0
