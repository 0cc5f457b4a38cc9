"""The emulator's session table on its own, without serving: bounded, and an evicted session still trusted.
The emulator over a socket: tests/e2e/test_emulator.py."""

from __future__ import annotations

from http.cookies import SimpleCookie

import pytest


def test_the_session_table_is_bounded_and_an_evicted_session_is_still_trusted(monkeypatch):
    from etl_emulator import sessions
    from etl_emulator.accounts import accounts
    from etl_emulator.faults import FaultPlan, Faults
    from etl_emulator.routing import Call

    monkeypatch.setattr(sessions, "LIVE_MAX", 3)
    store = sessions.Sessions(accounts(None, range(1, 3)), "/x", FaultPlan(Faults()))
    signed = [
        store.sign_in(Call("POST", "/auth/login", {"username": ["demo"], "password": ["demo"]}, ()))
        for _ in range(5)
    ]
    assert len(store.live) == 3  # a soak that signs in without end keeps a bounded table
    first = SimpleCookie()
    for name, value in signed[0].headers:
        if name == b"set-cookie":
            first.load(value.decode())
    cookie = "; ".join(f"{k}={first[k].value}" for k in ("SEMSESSIONID", "issToken"))
    assert store.check([(b"cookie", cookie.encode())]).login == "demo"
    with pytest.raises(sessions.SessionEnded):
        store.check([(b"cookie", cookie.replace("issToken=", "issToken=x").encode())])
