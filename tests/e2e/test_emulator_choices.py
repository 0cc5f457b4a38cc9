"""Choices a real server may make where the document is silent, each played by the emulator over a
real socket: how sign-in takes the credentials, how a call without a live session is answered, caps
and defaults of `count`, and the body of error answers (docs/emulator.md, fault table)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import orjson
import pytest

from etl_emulator.faults import ERROR_BODIES, SESSION_ENDS
from etl_emulator.server import EmulatorConfig, RunningEmulator, run_emulator
from tests.support.cli import etl, etl_process

DAY = 86_400_000
HOUR = 3_600_000
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
NOW = T0 + 20 * DAY
ANALOG, SIGNAL, CALC = 1001, 1003, 1501
CREDENTIALS = {"username": "demo", "password": "demo"}


def config(**overrides) -> EmulatorConfig:
    return EmulatorConfig(
        **{**dict(seed=11, objects=2, params_per_object=3, calc_per_object=1, now_ms=NOW), **overrides}
    )


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with run_emulator(config()) as running:
        yield running


@pytest.fixture(autouse=True)
def no_faults(emu) -> Iterator[None]:
    emu.set_faults(reset=True)
    yield
    emu.set_faults(reset=True)


@contextmanager
def client(emu: RunningEmulator, **sign_in) -> Iterator[httpx.Client]:
    """A client signed in with the credentials as query parameters (or as given)."""
    with httpx.Client(base_url=emu.base_url, timeout=10) as c:
        response = c.post("/auth/login", **(sign_in or {"params": CREDENTIALS}))
        assert response.status_code == 200, response.text
        yield c


# -- sign-in ----------------------------------------------------------------------------------------


def test_sign_in_takes_a_form_body_as_well_as_query_parameters(emu):
    with client(emu, data=CREDENTIALS) as c:
        assert c.get("/db/object/shortest").status_code == 200
        assert {"SEMSESSIONID", "issToken"} <= set(c.cookies)
    form = httpx.post(f"{emu.base_url}/auth/login", data={"username": "demo", "password": "wrong"})
    assert form.status_code == 401 and form.json()["error"] == "bad_credentials"
    entries = emu.requests()[-3:]
    assert entries[0]["form"] == {"username": "demo"} and entries[0]["query"] == {}
    assert entries[2]["status"] == 401 and entries[2]["form"] == {"username": "demo"}


def test_a_form_password_with_special_characters_never_reaches_the_log(tmp_path):
    password = "p&ss=w rd%+?#/é"
    log_file = tmp_path / "requests.jsonl"
    users = [{"login": "odd user", "password": password, "objects": "all"}]
    with run_emulator(config(users=users, request_log=log_file)) as emu:
        with client(emu, data={"username": "odd user", "password": password}) as c:
            assert c.get("/db/object/shortest").status_code == 200
        assert (
            httpx.post(
                f"{emu.base_url}/auth/login", data={"username": "odd user", "password": password[:-1]}
            ).status_code
            == 401
        )
        logged = orjson.dumps(emu.requests())
    for text in (logged, log_file.read_bytes()):
        assert (
            b"odd user" in text and b"password" not in text and b"p&ss" not in text and b"p%26ss" not in text
        )


@pytest.mark.parametrize(
    "via, query_ok, form_ok", [("both", True, True), ("query", True, False), ("form", False, True)]
)
def test_sign_in_via_one_form_only(emu, via, query_ok, form_ok):
    emu.set_faults(sign_in_via=via)
    by_query = httpx.post(f"{emu.base_url}/auth/login", params=CREDENTIALS)
    by_form = httpx.post(f"{emu.base_url}/auth/login", data=CREDENTIALS)
    assert (by_query.status_code, by_form.status_code) == (200 if query_ok else 401, 200 if form_ok else 401)


# -- calls without a live session ---------------------------------------------------------------------


def _without_a_session(emu: RunningEmulator, c: httpx.Client) -> list[httpx.Response]:
    """Calls with no cookies, with a forged token, and with a session spent by session_max_requests."""
    answers = [
        httpx.get(f"{emu.base_url}/db/object"),
        httpx.get(
            f"{emu.base_url}/db/object",
            cookies={"SEMSESSIONID": c.cookies["SEMSESSIONID"], "issToken": "forged"},
        ),
    ]
    emu.set_faults(session_max_requests=1)
    assert c.get("/db/object").status_code == 200
    answers.append(c.get("/db/object"))
    answers.append(c.get(f"/db/measure/{ANALOG}/{T0}/{T0 + HOUR}"))
    return answers


@pytest.mark.parametrize("choice", SESSION_ENDS)
def test_how_an_ended_session_is_answered(emu, choice):
    emu.set_faults(session_end=choice)
    with client(emu) as c:
        answers = _without_a_session(emu, c)
    for response in answers:
        kind = response.headers.get("content-type", "")
        if choice in ("401", "403"):
            assert response.status_code == int(choice) and kind == "application/json"
            assert response.json()["status"] == int(choice)
        elif choice == "302-login":
            assert (
                response.status_code == 302
                and response.headers["location"] == f"{emu.config.base_path}/login"
            )
            assert response.content == b""
        elif choice == "302-home":
            assert response.status_code == 302 and response.headers["location"] == "/"
        else:
            assert response.status_code == 200 and kind.startswith("text/html")
            assert b"<form" in response.content and b'name="password"' in response.content
    log = emu.requests()[-5:]
    assert all(e.get("session_ended") for e in log[:2] + log[3:]) and "session_ended" not in log[2]
    # sign-in itself keeps its own answers
    assert (
        httpx.post(f"{emu.base_url}/auth/login", params={"username": "demo", "password": "x"}).status_code
        == 401
    )


def test_an_aged_session_is_answered_the_chosen_way(emu):
    emu.set_faults(session_end="302-home", session_max_age=0.2)
    with client(emu) as c:
        assert c.get("/db/object").status_code == 200
        time.sleep(0.3)
        assert c.get("/db/object").status_code == 302


# -- count ---------------------------------------------------------------------------------------------

SERIES = [
    f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}",
    f"/db/measure/average/{ANALOG}/{T0}/{T0 + 3 * DAY}",
    f"/db/measure/candles/{ANALOG}/{T0}/{T0 + 3 * DAY}",
    f"/db/measure/{ANALOG}/average/{T0}/{T0 + 3 * DAY}",
    f"/db/calcvalue/{CALC}/{T0}/{T0 + DAY}",
    f"/db/calcvalue/average/{CALC}/{T0}/{T0 + 3 * DAY}",
    f"/db/calcvalue/candles/{CALC}/{T0}/{T0 + 3 * DAY}",
    f"/db/signal/{SIGNAL}/{T0}/{T0 + DAY}",
]


def _rows(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    doc = response.json()
    return doc.get("points", doc.get("candles"))


def test_max_count_silently_keeps_the_first_points_of_every_series(emu):
    with client(emu) as c:
        full = {path: _rows(c.get(path)) for path in SERIES}
        assert all(len(rows) > 20 for rows in full.values())
        emu.set_faults(max_count=7)
        for path in SERIES:
            assert _rows(c.get(path)) == full[path][:7], path
            assert _rows(c.get(path, params={"count": 100})) == full[path][:7], path
        assert (
            _rows(c.get(SERIES[0], params={"count": 3})) == full[SERIES[0]][:3]
        )  # a smaller count still cuts


def test_count_default_and_count_reject_over(emu):
    with client(emu) as c:
        full = _rows(c.get(SERIES[0]))
        emu.set_faults(count_default=5)
        assert _rows(c.get(SERIES[0])) == full[:5]
        assert _rows(c.get(SERIES[0], params={"count": 9})) == full[:9]
        signal = _rows(c.get(SERIES[7]))
        assert len(signal) > 5  # signal takes no count, so no default either
        emu.set_faults(count_reject_over=50)
        assert _rows(c.get(SERIES[0], params={"count": 50})) == full[:50]
        refused = c.get(SERIES[0], params={"count": 51})
        assert refused.status_code == 400 and refused.json()["error"] == "bad_request"
        assert "50" in refused.json()["message"]
        assert _rows(c.get(SERIES[7])) == signal


# -- error bodies ----------------------------------------------------------------------------------------


def _errors(emu: RunningEmulator, c: httpx.Client) -> dict[str, httpx.Response]:
    answers = {
        "404": c.get("/db/object/999"),
        "404 outside": httpx.get(f"{emu.url}/elsewhere"),
        "400": c.get(SERIES[0], params={"count": "many"}),
        "405": c.post("/db/object"),
        "401 sign-in": httpx.post(f"{emu.base_url}/auth/login", params={"username": "demo", "password": "x"}),
        "401 session": httpx.get(f"{emu.base_url}/db/object"),
    }
    with client(emu, params={"username": "restricted", "password": "restricted"}) as restricted:
        answers["403"] = restricted.post(f"/db/contrdeviceparam/{ANALOG}/setvalue", params={"value": 1})
    emu.set_faults(error_rate=1.0, seed=3)
    answers.update({f"5xx {i}": c.get(SERIES[0]) for i in range(6)})
    emu.set_faults(error_rate=0.0, rate_limit_rate=1.0, retry_after=2)
    answers["429"] = c.get(SERIES[0])
    return answers


@pytest.mark.parametrize("style", ERROR_BODIES)
def test_error_bodies(emu, style):
    with client(emu) as c:
        emu.set_faults(error_body=style)
        answers = _errors(emu, c)
    assert answers["429"].headers["retry-after"] == "2"
    for name, response in answers.items():
        status = response.status_code
        assert str(status) == name.split()[0] or (name.startswith("5xx") and status in (500, 502, 503)), name
        kind = response.headers.get("content-type", "")
        if style == "json" and name.startswith("5xx"):
            continue  # injected server errors keep their mix of JSON and proxy HTML pages
        if style == "json":
            assert kind == "application/json" and response.json()["status"] == status, name
        elif style == "html":
            assert kind.startswith("text/html") and response.text.startswith("<!DOCTYPE html>"), name
            assert f"<h1>{status} " in response.text, name
        elif style == "text":
            assert kind.startswith("text/plain") and response.text.startswith(f"{status} "), name
        else:
            assert response.content == b"" and "content-type" not in response.headers, name


# -- the parameter search's envelope and how records mark a signal ------------------------------------


@pytest.mark.parametrize(
    "envelope, records_at, total_at",
    [
        ("array", None, None),
        ("items", "items", "total"),
        ("spring", "content", "totalElements"),
        ("data", "data", None),
    ],
)
def test_search_pages_in_each_envelope(emu, envelope, records_at, total_at):
    emu.set_faults(search_envelope=envelope)
    with client(emu) as c:
        pages = [
            c.get("/search/params", params={"oid": [1, 2], "limit": 3, "offset": o}).json() for o in (0, 6, 8)
        ]
    records = [page if records_at is None else page[records_at] for page in pages]
    assert [[r["id"] for r in page] for page in records] == [[1001, 1002, 1003], [2003, 2501], []]
    if total_at is not None:
        assert [page[total_at] for page in pages] == [8, 8, 8]
    if envelope == "spring":
        assert [(p["number"], p["numberOfElements"], p["last"], p["first"]) for p in pages] == [
            (0, 3, False, True),
            (2, 2, True, False),
            (2, 0, True, False),
        ]
        assert pages[0]["totalPages"] == 3 and pages[0]["pageable"]["offset"] == 0


@pytest.mark.parametrize("field", ["type", "paramType"])
@pytest.mark.parametrize("marker", ["type", "flag"])
def test_records_mark_a_signal_the_chosen_way(emu, field, marker):
    emu.set_faults(type_field=field, signal_marker=marker)
    with client(emu) as c:
        listed = c.get("/db/contrdeviceparam", params={"objectId": 1}).json()
        searched = c.get("/search/params", params={"oid": 1}).json()
    for records in (listed, [r for r in searched if r["id"] < 1500]):
        types = [(r.get(field), r.get("signal")) for r in records]
        if marker == "type":
            assert types == [("analog", None), ("analog", None), ("signal", None)]
        else:
            assert types == [("analog", False), ("analog", False), ("analog", True)]
        assert field == "type" or all("type" not in r for r in records)
    assert [(r.get(field), r.get("signal")) for r in searched if r["id"] > 1500] == [("calculated", None)]


def test_a_type_written_as_an_object(emu):
    emu.set_faults(type_shape="object")
    with client(emu) as c:
        listed = c.get("/db/contrdeviceparam", params={"objectId": 1}).json()
        searched = c.get("/search/params", params={"oid": 1}).json()
    assert [r["type"] for r in listed] == [{"id": 1, "name": "analog"}] * 2 + [{"id": 3, "name": "signal"}]
    assert [r["type"] for r in searched][-1] == {"id": 2, "name": "calculated"}


def test_the_fleet_changes_while_serving(emu):
    """Objects and parameters added or removed (the control API's fleet): lists, search and series follow;
    an added parameter serves its whole history, a removed one answers 404."""
    try:
        assert emu.set_fleet(objects=3, added=[1004, 1502], removed=[1002]) == {
            "objects": 3,
            "added": [1004, 1502],
            "removed": [1002],
        }
        with client(emu) as c:
            physical = [r["id"] for r in c.get("/db/contrdeviceparam", params={"objectId": 1}).json()]
            searched = [r["id"] for r in c.get("/search/params", params={"oid": [1, 3]}).json()]
            added = c.get(f"/db/measure/1004/{T0}/{T0 + HOUR}").json()["points"]
            assert c.get(f"/db/measure/1002/{T0}/{T0 + HOUR}").status_code == 404
            assert [o["id"] for o in c.get("/db/object/shortest").json()] == [1, 2, 3]
        assert physical == [1001, 1003, 1004]
        assert searched == [1001, 1003, 1004, 1501, 1502, 3001, 3002, 3003, 3501] and added
        for bad in ({"added": [9001]}, {"objects": -1}, {"removed": "1002"}, {"params": 3}):
            assert httpx.put(f"{emu.url}/_emulator/fleet", json=bad).status_code == 400, bad
    finally:
        emu.set_fleet(objects=2, added=[], removed=[])


def test_new_settings_are_validated_at_run_time(emu):
    root = emu.url + "/_emulator"
    for bad in (
        {"session_end": "418"},
        {"error_body": "xml"},
        {"sign_in_via": "header"},
        {"max_count": 0},
        {"count_default": None},
        {"count_reject_over": "10"},
        {"type_field": "kind"},
        {"signal_marker": "bit"},
        {"search_envelope": "xml"},
        {"type_shape": "number"},
    ):
        assert httpx.put(f"{root}/faults", json=bad).status_code == 400, bad
    assert emu.set_faults(session_end=403)["session_end"] == "403"


def test_serve_flags_set_them():
    serve = ["emulator", "serve", "--port", "0", "--objects", "1", "--log-level", "warning"]
    flags = ["--session-end", "302-login", "--error-body", "text", "--sign-in-via", "form"]
    flags += ["--max-count", "5", "--count-default", "3", "--count-reject-over", "1000"]
    flags += ["--type-field", "paramType", "--signal-marker", "flag", "--search-envelope", "spring"]
    flags += ["--type-shape", "object"]
    process = etl_process(*serve, *flags, stdout=None)
    try:
        line = process.stderr.readline()
        root = line.split("listening on ")[1].split(EmulatorConfig().base_path)[0]
        assert etl("emulator", "wait", "--url", root, "--timeout", "10").returncode == 0
        faults = httpx.get(f"{root}/_emulator/faults").json()
        assert {
            k: faults[k]
            for k in (
                "session_end",
                "error_body",
                "sign_in_via",
                "max_count",
                "count_default",
                "count_reject_over",
                "type_field",
                "signal_marker",
                "search_envelope",
                "type_shape",
            )
        } == {
            "session_end": "302-login",
            "error_body": "text",
            "sign_in_via": "form",
            "max_count": 5,
            "count_default": 3,
            "count_reject_over": 1000,
            "type_field": "paramType",
            "signal_marker": "flag",
            "search_envelope": "spring",
            "type_shape": "object",
        }
    finally:
        process.terminate()
        process.wait(10)
