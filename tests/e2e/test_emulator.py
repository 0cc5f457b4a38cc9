"""The emulator over a real socket with plain httpx: the contract of docs/emulator.md. Its session
table on its own: tests/unit/emulator/test_emulator_sessions.py."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.cookies import SimpleCookie

import httpx
import numpy as np
import orjson
import pytest

from etl.timeutil import to_ms
from etl_emulator import series
from etl_emulator.dataset import as_dataset
from etl_emulator.faults import HOSTILE_KINDS
from etl_emulator.server import EmulatorConfig, RunningEmulator, run_emulator
from tests.support.cli import etl, etl_process

DAY = 86_400_000
HOUR = 3_600_000
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
NOW = T0 + 20 * DAY
CONFIG = dict(seed=11, objects=3, params_per_object=3, calc_per_object=1, now_ms=NOW)
ANALOG, SIGNAL, CALC = 1001, 1003, 1501
BASE = "/sem-restservices"  # the default base path


def config(**overrides) -> EmulatorConfig:
    return EmulatorConfig(**{**CONFIG, **overrides})


@contextmanager
def signed_in(emu: RunningEmulator, username: str = "demo", password: str = "demo") -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emu.base_url, timeout=10) as client:
        response = client.post("/auth/login", params={"username": username, "password": password})
        assert response.status_code == 200, response.text
        yield client


def points(response: httpx.Response) -> tuple[np.ndarray, np.ndarray]:
    assert response.status_code == 200, response.text
    pts = response.json()["points"]
    ts = np.array([to_ms(p["timestmp"]) for p in pts], dtype=np.int64)
    return ts, np.array([p["value"] for p in pts], dtype=np.float64)


@pytest.fixture(scope="module")
def emu() -> Iterator[RunningEmulator]:
    with run_emulator(config()) as running:
        yield running


@pytest.fixture(scope="module")
def demo(emu) -> Iterator[httpx.Client]:
    with signed_in(emu) as client:
        yield client


@pytest.fixture
def fresh() -> Iterator[RunningEmulator]:
    with run_emulator(config()) as running:
        yield running


# -- sign-in and sessions -------------------------------------------------------------------------


def test_sign_in_sets_the_documented_cookies(emu):
    response = httpx.post(f"{emu.base_url}/auth/login", params={"username": "demo", "password": "demo"})
    assert response.status_code == 200
    assert response.headers["access-control-allow-credentials"] == "true"
    user = response.json()
    assert user["login"] == "demo" and user["state"]["id"] == 1 and user["authService"] == "LOCAL"
    cookies = {}
    for header in response.headers.get_list("set-cookie"):
        jar = SimpleCookie()
        jar.load(header)
        cookies.update({name: (morsel, header) for name, morsel in jar.items()})
    assert set(cookies) == {"SEMSESSIONID", "rememberMe", "language", "issToken"}
    sid, sid_header = cookies["SEMSESSIONID"]
    assert sid["path"] == "/" and sid["httponly"] and sid["samesite"].lower() == "lax"
    remember, _ = cookies["rememberMe"]
    assert remember.value == "deleteMe" and remember["path"] == BASE and remember["max-age"] == "0"
    assert cookies["language"][0]["path"] == BASE
    assert cookies["issToken"][0]["path"] == "/" and cookies["issToken"][0].value


def test_calls_without_a_live_session_get_401(emu, demo):
    assert httpx.get(f"{emu.base_url}/db/object").status_code == 401
    sid = demo.cookies["SEMSESSIONID"]
    for cookies in (
        {"SEMSESSIONID": sid},
        {"issToken": demo.cookies["issToken"]},
        {"SEMSESSIONID": sid, "issToken": "forged"},
        {"SEMSESSIONID": "0" * 44, "issToken": "x"},
    ):
        response = httpx.get(f"{emu.base_url}/db/object", cookies=cookies)
        assert response.status_code == 401 and response.json()["error"] == "unauthorized", cookies
    assert demo.get("/db/object").status_code == 200


@pytest.mark.parametrize("username, password", [("demo", "wrong"), ("nobody", "demo"), ("demo", "")])
def test_wrong_credentials_get_401(emu, username, password):
    response = httpx.post(f"{emu.base_url}/auth/login", params={"username": username, "password": password})
    assert response.status_code == 401 and response.json()["error"] == "bad_credentials"
    assert not response.headers.get_list("set-cookie")


def test_password_with_special_characters_and_log_without_it():
    password = "p&ss=w rd%+?#/é"
    users = [{"login": "odd user", "password": password, "objects": [2]}]
    with run_emulator(config(users=users)) as emu:
        with signed_in(emu, "odd user", password) as client:
            assert [o["id"] for o in client.get("/db/object").json()] == [2]
        assert (
            httpx.post(
                f"{emu.base_url}/auth/login", params={"username": "odd user", "password": password[:-1]}
            ).status_code
            == 401
        )
        logged = orjson.dumps(emu.requests()).decode()
        assert "username" in logged and "password" not in logged and "p&ss" not in logged


def test_restricted_login_sees_only_odd_objects_everywhere(emu):
    with signed_in(emu, "restricted", "restricted") as c:
        assert [o["id"] for o in c.get("/db/object").json()] == [1, 3]
        assert [o["id"] for o in c.get("/db/object/shortest").json()] == [1, 3]
        for path in (
            "/db/object/2",
            "/db/object/2/unit",
            "/db/object/2/cdp",
            "/db/object/2/params",
            f"/db/measure/2001/{T0}/{T0 + HOUR}",
            f"/db/calcvalue/average/2501/{T0}/{T0 + HOUR}",
            "/db/contrdeviceparam/2001/state",
            "/extcommand?deviceId=201",
        ):
            assert c.get(path).status_code == 404, path
        assert c.post("/db/contrdeviceparam/2001/setvalue", params={"value": 1}).status_code == 404
        assert (
            c.post("/db/unit/201/command", params={"extCommandId": 2011, "commandData": ""}).status_code
            == 404
        )
        for path in ("/db/contrdeviceparam", "/db/contrcalcparam", "/search/params?oid=1&oid=2&oid=3"):
            assert {r["objectId"] for r in c.get(path).json()} == {1, 3}, path
        assert c.get("/db/contrdeviceparam?objectId=2").json() == []
        assert {r["objectId"] for r in c.post("/room").json()} == {1, 3}
        # it may read what it sees, but not act on it
        assert c.post("/db/contrdeviceparam/1001/setvalue", params={"value": 1}).status_code == 403
        assert (
            c.post("/db/unit/101/command", params={"extCommandId": 1011, "commandData": ""}).status_code
            == 403
        )
        assert emu.commands() == []


# -- records --------------------------------------------------------------------------------------


def test_records_follow_the_data_model(demo):
    objects = demo.get("/db/object").json()
    assert [o["timezone"] for o in objects] == [3, 0, -5]
    assert [o["sdirobjectstate"]["id"] for o in objects] == [2, 2, 1]
    assert [o["id"] for o in demo.get("/db/object", params=[("state", 1), ("state", 2)]).json()] == [1, 2, 3]
    assert [o["id"] for o in demo.get("/db/object", params={"state": 1}).json()] == [3]
    assert "operatingMode" not in demo.get("/db/object/1").json()
    assert demo.get("/db/object/2").json()["operatingMode"] == {"id": 1, "name": "auto"}
    units = demo.get("/db/object/1/unit").json()
    assert [u["deviceconnect"]["device"]["id"] for u in units] == [101, 102]
    phys = demo.get("/db/contrdeviceparam", params={"objectId": 1}).json()
    assert [(p["id"], p["type"]) for p in phys] == [(1001, "analog"), (1002, "analog"), (1003, "signal")]
    assert demo.get("/db/contrdeviceparam/shortest", params={"objectId": 1}).json()[0] == {
        "id": 1001,
        "name": phys[0]["name"],
    }
    calc = demo.get("/db/contrcalcparam", params={"objectId": 1}).json()
    assert [(p["id"], p["type"]) for p in calc] == [(1501, "calculated")] and "formula" in calc[0]
    by_controller = demo.get("/db/contrdeviceparam", params=[("controllerId", 11), ("objectId", 1)]).json()
    assert by_controller and all(p["controllerId"] == 11 for p in by_controller)
    assert all(
        "alarm" in p["tags"] for p in demo.get("/db/contrdeviceparam", params={"tags": "alarm"}).json()
    )
    assert [p["id"] for p in demo.get("/db/object/1/cdp", params={"ctrability": "true"}).json()] == [
        p["id"] for p in phys if p["ctrability"]
    ]
    assert {p["id"] for p in demo.get("/db/object/1/params", params={"calc": "true"}).json()} == {
        1001,
        1002,
        1003,
        1501,
    }
    assert {p["id"] for p in demo.get("/db/object/1/params").json()} == {1001, 1002, 1003}
    pages = [
        demo.get("/search/params", params={"oid": [1, 2], "limit": 3, "offset": o}).json()
        for o in (0, 3, 6, 9)
    ]
    assert [len(p) for p in pages] == [3, 3, 2, 0]
    ids = [r["id"] for page in pages for r in page]
    assert ids == sorted(ids) == [1001, 1002, 1003, 1501, 2001, 2002, 2003, 2501]
    assert demo.post("/room", params={"objectId": 1, "sensorLocationId": 2}).json() == [
        {"id": 12, "name": "plant room 1", "objectId": 1, "sensorLocationId": 2}
    ]


def test_every_endpoint_answers_200(demo):
    gets = [
        "/db/object/shortest",
        "/db/object",
        "/db/object?state=1&state=2",
        "/db/object/1",
        "/db/object/2",
        "/db/object/1/unit",
        "/db/contrdeviceparam",
        "/db/contrdeviceparam/shortest?objectId=1",
        "/db/contrdeviceparam?objectId=1&controllerId=11&controllerId=12&droneID=11&tags=temperature"
        "&deviceClassified=1&roomID=11",
        "/db/contrcalcparam",
        "/db/contrcalcparam/shortest?controllerId=11",
        "/db/object/1/cdp",
        "/db/object/1/cdp?ctrability=true&locked=false&tag=temperature&tag=alarm",
        "/db/object/1/ccp",
        "/db/object/1/params?calc=true",
        "/search/params?oid=1&oid=2&limit=5&offset=0",
        f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}?count=100",
        f"/db/measure/average/{ANALOG}/{T0}/{T0 + DAY}",
        f"/db/measure/candles/{ANALOG}/{T0}/{T0 + DAY}",
        f"/db/measure/{ANALOG}/average/{T0}/{T0 + DAY}",
        f"/db/measure/{ANALOG}/candles/{T0}/{T0 + DAY}",
        f"/db/calcvalue/{CALC}/{T0}/{T0 + DAY}",
        f"/db/calcvalue/average/{CALC}/{T0}/{T0 + DAY}",
        f"/db/calcvalue/candles/{CALC}/{T0}/{T0 + DAY}",
        f"/db/signal/{SIGNAL}/{T0}/{T0 + DAY}",
        f"/db/contrdeviceparam/{ANALOG}/state",
        f"/db/contrdeviceparam/{ANALOG}/state?time={T0}",
        "/extcommand?deviceId=101",
    ]
    for path in gets:
        response = demo.get(path)
        assert response.status_code == 200 and response.headers["content-type"] == "application/json", path
        response.json()
    posts = [
        "/db/zone",
        "/deviceclassifier",
        "/sensor_location",
        "/room",
        "/room?objectId=1&sensorLocationId=1",
        f"/db/contrdeviceparam/{ANALOG}/setvalue?value=12.5",
        "/db/unit/101/command?extCommandId=1011&commandData=x",
    ]
    for path in posts:
        response = demo.post(path)
        assert response.status_code == 200, path
        response.json()


def test_unknown_paths_methods_and_integers(demo):
    assert demo.get("/db/nothing").status_code == 404
    assert demo.get("/db/object/999").json()["error"] == "not_found"
    assert demo.get("/db/object/abc").status_code == 400
    assert demo.post("/db/object").status_code == 405
    assert demo.get(f"/db/measure/{ANALOG}/x/{T0}").json()["error"] == "bad_request"
    assert demo.get(f"/db/measure/{ANALOG}/{T0}/{T0 + HOUR}", params={"count": "many"}).status_code == 400


# -- series ---------------------------------------------------------------------------------------


def test_raw_window_limits_and_errors(demo):
    assert demo.get(f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}").status_code == 200
    for path in (
        f"/db/measure/{ANALOG}/{T0}/{T0 + DAY + 1}",
        f"/db/measure/{ANALOG}/{T0 + 1}/{T0}",
        f"/db/calcvalue/{CALC}/{T0}/{T0 + DAY + 1}",
        f"/db/signal/{SIGNAL}/{T0}/{T0 + 2 * DAY}",
    ):
        response = demo.get(path)
        assert response.status_code == 400 and response.json()["error"] == "bad_request", path
        assert response.json()["status"] == 400
    assert demo.get(f"/db/measure/average/{ANALOG}/{T0}/{T0 + 30 * DAY}").status_code == 200  # no limit


def test_both_window_ends_are_included_and_count_cuts(demo):
    ts, values = points(demo.get(f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}"))
    assert len(ts) > 50 and (np.diff(ts) > 0).all() and ts[0] >= T0 and ts[-1] <= T0 + DAY
    a, b = int(ts[10]), int(ts[20])
    inner, _ = points(demo.get(f"/db/measure/{ANALOG}/{a}/{b}"))
    assert inner.tolist() == ts[10:21].tolist()
    first, _ = points(demo.get(f"/db/measure/{ANALOG}/{a}/{b}", params={"count": 4}))
    assert first.tolist() == ts[10:14].tolist()
    assert demo.get(f"/db/measure/{ANALOG}/{a}/{b}", params={"count": 0}).status_code == 400


def test_count_defaults_to_10000_and_is_capped_at_100000(demo, emu):
    # 30-minute buckets over 7 years: more than both limits (of the slowest parameter, to stay quick).
    ds = as_dataset(emu.config)
    slowest = max(
        (pid for o in ds.object_ids for pid in ds.physical_ids(o)), key=lambda p: ds.param(p).period_ms
    )
    url = f"/db/measure/average/{slowest}/{T0 - 7 * 365 * DAY}/{T0}"
    assert len(demo.get(url).json()["points"]) == 10_000
    assert len(demo.get(url, params={"count": 10**9}).json()["points"]) == 100_000


def test_series_equal_the_data_functions(demo, emu):
    ds = as_dataset(emu.config)
    for path, want in [
        (f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}", series.raw_series(ds, ANALOG, T0, T0 + DAY)),
        (f"/db/calcvalue/{CALC}/{T0}/{T0 + DAY}", series.raw_series(ds, CALC, T0, T0 + DAY)),
        (f"/db/signal/{SIGNAL}/{T0}/{T0 + DAY}", series.raw_series(ds, SIGNAL, T0, T0 + DAY)),
        (
            f"/db/measure/average/{ANALOG}/{T0}/{T0 + 3 * DAY}",
            series.average_series(ds, ANALOG, T0, T0 + 3 * DAY),
        ),
        (f"/db/calcvalue/average/{CALC}/{T0}/{T0 + DAY}", series.average_series(ds, CALC, T0, T0 + DAY)),
    ]:
        ts, values = points(demo.get(path))
        assert ts.tolist() == want[0].tolist() and values.tolist() == want[1].tolist(), path
    _, signal = points(demo.get(f"/db/signal/{SIGNAL}/{T0}/{T0 + DAY}"))
    assert set(signal.tolist()) == {0.0, 1.0}


def test_each_day_has_one_documented_gap_and_the_series_is_silent_only_there(demo, emu):
    for param_id in (ANALOG, SIGNAL, CALC):
        spans = emu.gaps(param_id, T0, T0 + 2 * DAY - 1)
        assert len(spans) == 2 and all(15 * 60_000 <= g["end"] - g["start"] <= 90 * 60_000 for g in spans)
        period = as_dataset(emu.config).param(param_id).period_ms
        for day, gap in zip((T0, T0 + DAY), spans, strict=True):
            route = "calcvalue" if param_id == CALC else "signal" if param_id == SIGNAL else "measure"
            ts, _ = points(demo.get(f"/db/{route}/{param_id}/{day}/{day + DAY - 1}"))
            assert not ((ts >= gap["start"]) & (ts < gap["end"])).any()
            spacing = np.diff(ts)
            assert spacing.max() >= gap["end"] - gap["start"] - period  # the longest silence is the gap
            assert (
                np.sort(spacing)[-2] if len(spacing) > 1 else 0
            ) < 1.5 * period  # and the only one (jitter < P/2)
    assert httpx.get(f"{emu.url}/_emulator/gaps?param=999999&start=0&end=1").status_code == 404
    assert httpx.get(f"{emu.url}/_emulator/gaps?param={ANALOG}").status_code == 400


def test_average_is_the_bucket_mean_of_raw(demo):
    start, end = T0 + 7 * 60_000, T0 + 23 * HOUR + 30 * 60_000  # buckets 00:30 .. 23:30
    raw_ts, raw_values = points(demo.get(f"/db/measure/{ANALOG}/{T0}/{T0 + DAY - 1}"))
    avg_ts, avg_values = points(demo.get(f"/db/measure/average/{ANALOG}/{start}/{end}"))
    alt_ts, alt_values = points(demo.get(f"/db/measure/{ANALOG}/average/{start}/{end}"))
    assert avg_ts.tolist() == alt_ts.tolist() and avg_values.tolist() == alt_values.tolist()
    buckets = raw_ts // series.BUCKET_MS * series.BUCKET_MS
    want = {b: raw_values[buckets == b].mean() for b in np.unique(buckets) if start <= b <= end}
    assert avg_ts.tolist() == sorted(want) and avg_ts[0] == T0 + 30 * 60_000
    np.testing.assert_allclose(avg_values, [want[b] for b in avg_ts.tolist()], rtol=1e-12)


def test_candles_agree_with_raw(demo):
    raw_ts, raw_values = points(demo.get(f"/db/measure/{ANALOG}/{T0}/{T0 + DAY - 1}"))
    candles = demo.get(f"/db/measure/candles/{ANALOG}/{T0}/{T0 + 23 * HOUR}").json()["candles"]
    assert candles == demo.get(f"/db/measure/{ANALOG}/candles/{T0}/{T0 + 23 * HOUR}").json()["candles"]
    for candle in candles:
        b = candle["timestmp"]
        assert isinstance(b, int) and b % series.BUCKET_MS == 0
        inside = raw_values[(raw_ts >= b) & (raw_ts < b + series.BUCKET_MS)]
        assert (candle["open"], candle["high"], candle["low"], candle["close"]) == (
            inside[0],
            inside.max(),
            inside.min(),
            inside[-1],
        )


def test_series_are_deterministic(demo):
    a_ts, a_v = points(demo.get(f"/db/measure/{ANALOG}/{T0}/{T0 + 12 * HOUR}"))
    b_ts, b_v = points(demo.get(f"/db/measure/{ANALOG}/{T0 + 6 * HOUR}/{T0 + 18 * HOUR}"))
    overlap = a_ts >= T0 + 6 * HOUR
    assert a_ts[overlap].tolist() == b_ts[b_ts <= T0 + 12 * HOUR].tolist()
    assert a_v[overlap].tolist() == b_v[b_ts <= T0 + 12 * HOUR].tolist()
    path = f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}"
    with run_emulator(config()) as twin, signed_in(twin) as c:
        assert c.get(path).content == demo.get(path).content
    with run_emulator(config(seed=12)) as other, signed_in(other) as c:
        assert points(c.get(path))[1].tolist() != points(demo.get(path))[1].tolist()


def test_routes_take_only_their_kind_of_parameter(demo):
    assert demo.get(f"/db/measure/{CALC}/{T0}/{T0 + HOUR}").status_code == 404
    assert demo.get(f"/db/measure/average/{CALC}/{T0}/{T0 + HOUR}").status_code == 404
    assert demo.get(f"/db/calcvalue/{ANALOG}/{T0}/{T0 + HOUR}").status_code == 404
    assert demo.get(f"/db/signal/{ANALOG}/{T0}/{T0 + HOUR}").status_code == 400
    assert demo.get(f"/db/measure/9999/{T0}/{T0 + HOUR}").status_code == 404


def test_no_point_is_later_than_the_clock(fresh):
    fresh.set_clock(T0 + 12 * HOUR)
    with signed_in(fresh) as c:
        ts, _ = points(c.get(f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}"))
        assert ts.max() <= T0 + 12 * HOUR < ts.max() + 2 * HOUR
        fresh.set_clock(None)
        assert fresh.clock()["now"] is None and abs(fresh.clock()["current"] - time.time() * 1000) < 60_000
        later, _ = points(c.get(f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}"))
        assert later.max() > T0 + 12 * HOUR


def test_setvalue_rules_and_visibility(fresh):
    with signed_in(fresh) as c:
        answer = c.post(f"/db/contrdeviceparam/{ANALOG}/setvalue", params={"value": 5000.25})
        assert answer.json() == {"id": ANALOG, "value": 5000.25, "timestmp": "2026-11-21T00:00:00.000Z"}
        ts, values = points(c.get(f"/db/measure/{ANALOG}/{NOW - HOUR}/{NOW}"))
        assert ts[-1] == NOW and values[-1] == 5000.25
        assert c.get(f"/db/contrdeviceparam/{ANALOG}/state").json()["statecolor"] == "critical"
        assert c.post(f"/db/contrdeviceparam/{SIGNAL}/setvalue", params={"value": 0.5}).status_code == 400
        assert c.post(f"/db/contrdeviceparam/{SIGNAL}/setvalue", params={"value": 1}).status_code == 200
        assert c.post(f"/db/contrdeviceparam/{CALC}/setvalue", params={"value": 1}).status_code == 404
        assert c.post(f"/db/contrdeviceparam/{ANALOG}/setvalue", params={"value": "nan"}).status_code == 400
        assert c.post(f"/db/contrdeviceparam/{ANALOG}/setvalue").status_code == 400


def test_commands_are_listed_and_runs_recorded(fresh):
    with signed_in(fresh) as c:
        commands = c.get("/extcommand", params={"deviceId": 102}).json()
        assert [cmd["id"] for cmd in commands] == [1021, 1022] and commands[0]["device"]["id"] == 102
        data_part = "a=1&b=two words%+"
        answer = c.post("/db/unit/102/command", params={"extCommandId": 1022, "commandData": data_part})
        assert answer.json() == {"id": 1, "status": "accepted"}
        assert (
            c.post("/db/unit/102/command", params={"extCommandId": 1011, "commandData": ""}).status_code
            == 404
        )
        assert c.get("/extcommand").status_code == 400
    runs = fresh.commands()
    assert [(r["deviceId"], r["extCommandId"], r["commandData"], r["login"]) for r in runs] == [
        (102, 1022, data_part, "demo")
    ]


# -- faults ---------------------------------------------------------------------------------------

SERIES = f"/db/measure/{ANALOG}/{T0}/{T0 + DAY}"


def test_server_errors_half_json_half_html(fresh):
    fresh.set_faults(error_rate=1.0, seed=1)
    with signed_in_despite_faults(fresh) as c:
        answers = [c.get(SERIES) for _ in range(20)]
    assert {r.status_code for r in answers} <= {500, 502, 503} and len({r.status_code for r in answers}) > 1
    kinds = {r.headers["content-type"].split(";")[0] for r in answers}
    assert kinds == {"application/json", "text/html"}
    assert all(r.json()["error"] == "server_error" for r in answers if "json" in r.headers["content-type"])


@contextmanager
def signed_in_despite_faults(emu: RunningEmulator) -> Iterator[httpx.Client]:
    """Sign in with the faults paused, then put them back."""
    faults = emu.faults()
    emu.set_faults(reset=True)
    with signed_in(emu) as client:
        emu.set_faults(**faults)
        yield client


def test_rate_limit_has_retry_after(fresh):
    fresh.set_faults(rate_limit_rate=1.0, retry_after=2)
    response = httpx.post(f"{fresh.base_url}/auth/login", params={"username": "demo", "password": "demo"})
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    fresh.set_faults(retry_after=0.25)
    assert httpx.get(f"{fresh.base_url}/db/object").headers["retry-after"] == "0.25"


def test_throttled_params_answer_429_for_those_parameters_only(fresh):
    fresh.set_faults(throttled_params=[ANALOG], retry_after_text="600")
    with signed_in(fresh) as c:  # the sign-in and the other parameters are served
        throttled = c.get(SERIES)
        other = c.get(SERIES.replace(f"/{ANALOG}/", f"/{ANALOG + 1}/"))
    assert throttled.status_code == 429 and throttled.headers["retry-after"] == "600"
    assert other.status_code == 200
    assert [r.get("fault") for r in fresh.requests() if r.get("param_id")] == ["rate_limit", None]


def test_truncated_body_is_not_json(fresh):
    fresh.set_faults(truncate_rate=1.0)
    with signed_in(fresh) as c:  # sign-in is never truncated
        response = c.get(SERIES)
    assert (
        response.status_code == 200 and int(response.headers["content-length"]) == len(response.content) > 0
    )
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(response.content)


def test_dropped_connection_raises_in_httpx(fresh):
    with signed_in(fresh) as c:
        fresh.set_faults(drop_rate=1.0)
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            c.get(SERIES)
        fresh.set_faults(drop_rate=0.0)
        assert c.get(SERIES).status_code == 200
    assert fresh.requests()[-2]["fault"] == "drop"


def test_latency_and_spikes(fresh):
    fresh.set_faults(latency=0.15)
    started = time.monotonic()
    httpx.get(f"{fresh.base_url}/db/object")
    assert time.monotonic() - started >= 0.15
    fresh.set_faults(latency=0.0, latency_spike_rate=1.0, latency_spike=0.2)
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{fresh.base_url}/db/object", timeout=0.1)


def test_sessions_expire_after_n_requests_or_an_age(fresh):
    fresh.set_faults(session_max_requests=3)
    with signed_in(fresh) as c:
        assert [c.get("/db/object/shortest").status_code for _ in range(4)] == [200, 200, 200, 401]
        fresh.set_faults(session_max_requests=None)
        assert c.get("/db/object/shortest").status_code == 401  # a spent session stays spent
    fresh.set_faults(session_max_age=0.2)
    with signed_in(fresh) as c:
        assert c.get("/db/object/shortest").status_code == 200
        time.sleep(0.3)
        assert c.get("/db/object/shortest").status_code == 401
        assert c.post("/auth/login", params={"username": "demo", "password": "demo"}).status_code == 200
        assert c.get("/db/object/shortest").status_code == 200


@pytest.fixture(scope="module")
def hostile_emu() -> Iterator[RunningEmulator]:
    with run_emulator(config()) as running:
        yield running


TRANSPORT_KINDS = ("stuck", "drip", "endless", "gzip_bomb", "gzip_corrupt", "huge_headers")


@pytest.mark.parametrize("kind", TRANSPORT_KINDS)
def test_hostile_transport(hostile_emu, kind):
    """Answers that are slow, endless, compressed oddly, or blind to the start asked."""
    emu = hostile_emu
    emu.set_faults(reset=True, bomb_mb=64)
    path = f"/db/measure/{ANALOG}/{T0 + 6 * HOUR}/{T0 + 12 * HOUR}"
    with signed_in(emu) as c:
        want_ts, _ = points(c.get(path))
        midnight_ts, _ = points(c.get(f"/db/measure/{ANALOG}/{T0}/{T0 + 12 * HOUR}"))
        emu.set_faults(hostile=[kind])
        try:
            if kind == "stuck":  # from midnight, whatever the start
                got_ts, _ = points(c.get(path))
                assert got_ts.tolist() == midnight_ts.tolist() != want_ts.tolist()
            elif kind == "gzip_corrupt":
                with pytest.raises(httpx.DecodingError):
                    c.get(path)
            elif kind == "huge_headers":  # over httpx's cap of 100 KiB
                with pytest.raises(httpx.RemoteProtocolError, match="Receive buffer too long"):
                    c.get(path)
            else:
                with c.stream("GET", path) as response:
                    assert response.status_code == 200
                    if kind == "drip":  # one byte at a time, a second apart
                        raw = response.iter_raw()
                        assert next(raw) == b"{" and next(raw) == b'"'
                    elif kind == "endless":  # the start of an answer, then white space for ever
                        raw, size = response.iter_raw(), 0
                        assert next(raw).startswith(b'{"id":')
                        while size < 8 * 1024**2:
                            chunk = next(raw)
                            assert chunk.strip() == b""
                            size += len(chunk)
                    else:  # gzip_bomb: about 64 kB on the wire, 64 MiB once decompressed
                        packed = b"".join(response.iter_raw())
                        assert response.headers["content-encoding"] == "gzip" and len(packed) < 200_000
                        assert len(zlib.decompress(packed, 31)) == 64 * 1024**2 + len(b'{"points":[]}')
        finally:
            emu.set_faults(reset=True)


@pytest.mark.parametrize("kind", sorted(set(HOSTILE_KINDS) - set(TRANSPORT_KINDS)))
def test_hostile_answers(hostile_emu, kind):
    emu = hostile_emu
    emu.set_faults(reset=True)
    with signed_in(emu) as c:
        path = f"/db/measure/{ANALOG}/{T0}/{T0 + 6 * HOUR}"
        clean = c.get(path)
        want_ts, want_values = points(clean)
        emu.set_faults(hostile=[kind], seed=2)
        response = c.get(path)
        candles = c.get(f"/db/measure/candles/{ANALOG}/{T0}/{T0 + 6 * HOUR}")
        emu.set_faults(reset=True)
        assert c.get("/db/object/1").status_code == 200  # only series answers turn odd
    assert response.status_code == candles.status_code == 200
    assert emu.requests()[-2]["fault"] == f"hostile_{kind}"
    body = response.content
    if kind == "empty_body":
        assert body == b"" and candles.content == b""
        return
    if kind == "html_200":
        assert body.startswith(b"<!DOCTYPE html>") and response.headers["content-type"].startswith(
            "text/html"
        )
        return
    if kind == "deep_nesting":  # deeper than Python's parser goes, beside the points
        assert body.endswith(b"]" * 1100 + b"}") and b'"points":[' in body
        return
    if kind == "huge_stamps":  # epoch ms beyond int64
        assert b'"timestmp":100000000000000000000' in body
        return
    doc = __import__("json").loads(body)  # the stdlib parser reads the bare NaN token
    if kind == "error_200":
        assert doc == {"error": "database timeout"}
        return
    if kind == "empty_object":
        assert doc == {}
        return
    if kind == "points_null":
        assert doc["points"] is None
        return
    if kind == "misspelled":
        assert "points" not in doc and len(doc["Points"]) == len(want_ts)
        return
    if kind == "duplicate_key":  # the last of two "points" keys is empty
        assert body.count(b'"points"') == 2 and doc["points"] == []
        return
    got = doc["points"]
    values = [p["value"] for p in got]
    stamps = [p["timestmp"] for p in got]
    if kind == "nan":
        assert b"NaN" in body and any(v != v for v in values)
    elif kind == "null":
        assert None in values
    elif kind == "duplicates":
        assert len(got) > len(want_ts) and len(set(stamps)) == len(want_ts)
    elif kind == "shuffle":
        assert sorted(map(to_ms, stamps)) == want_ts.tolist() and list(map(to_ms, stamps)) != want_ts.tolist()
    elif kind == "outside":
        ms = list(map(to_ms, stamps))
        assert min(ms) < T0 and max(ms) > T0 + 6 * HOUR
    elif kind == "extra_fields":
        assert "meta" in doc and all("quality" in p for p in got)
    elif kind == "missing_fields":
        assert "id" not in doc and "points" in doc
    elif kind == "wrong_content_type":
        assert response.headers["content-type"].startswith("text/plain") and values == want_values.tolist()
    elif kind == "offsets":
        assert all(s.endswith("+03:00") for s in stamps) and list(map(to_ms, stamps)) == want_ts.tolist()
    elif kind == "no_millis":
        assert all(len(s) == 20 for s in stamps)
        assert list(map(to_ms, stamps)) == (want_ts // 1000 * 1000).tolist()
    elif kind == "huge":
        assert len(body) > 3_000_000 and values == want_values.tolist()
    elif kind == "infinity":
        assert b"Infinity" in body and b"1e309" in body and float("inf") in values
    elif kind == "string_values":
        assert [float(v) for v in values] == want_values.tolist() and any(isinstance(v, str) for v in values)
    elif kind == "bool_values":
        assert any(isinstance(v, bool) for v in values)
    elif kind == "epoch_seconds":
        assert stamps == (want_ts // 1000).tolist()
    elif kind == "date_only":
        assert set(stamps) == {"2026-11-01"} and len(stamps) == len(want_ts)
    elif kind == "conflicting":  # a bogus value first, then the real one, at the same stamp
        assert len(got) > len(want_ts) and len(set(stamps)) == len(want_ts)
        firsts = [i for i in range(len(stamps) - 1) if stamps[i] == stamps[i + 1]]
        assert firsts and all(values[i] == -999.0 for i in firsts)
        assert [v for i, v in enumerate(values) if i not in firsts] == want_values.tolist()


# -- control API and request log -------------------------------------------------------------------


def test_request_log_and_its_file(tmp_path):
    log_file = tmp_path / "requests.jsonl"
    with run_emulator(config(request_log=log_file)) as emu:
        with signed_in(emu) as c:
            c.get(f"/db/measure/{ANALOG}/{T0}/{T0 + HOUR}", params={"count": 5})
            c.get("/db/object", params=[("state", 1), ("state", 2)])
        log = emu.requests()
        assert [(e["method"], e["path"], e["status"]) for e in log] == [
            ("POST", f"{BASE}/auth/login", 200),
            ("GET", f"{BASE}/db/measure/{ANALOG}/{T0}/{T0 + HOUR}", 200),
            ("GET", f"{BASE}/db/object", 200),
        ]
        assert log[0]["query"] == {"username": "demo"}
        assert (
            log[1]["query"] == {"count": "5"}
            and log[1]["param_id"] == ANALOG
            and log[1]["interval_ms"] == HOUR
        )
        assert log[2]["query"] == {"state": ["1", "2"]} and isinstance(log[0]["ts"], int)
        emu.clear_requests()
        assert emu.requests() == []
    lines = [orjson.loads(line) for line in log_file.read_bytes().splitlines()]
    assert lines == log and b"password" not in log_file.read_bytes()


def test_control_api_validates(fresh):
    root = fresh.url + "/_emulator"
    assert httpx.put(f"{root}/faults", json={"no_such_fault": 1}).status_code == 400
    assert httpx.put(f"{root}/faults", json={"error_rate": 2}).status_code == 400
    assert httpx.put(f"{root}/faults", json={"hostile": ["bogus"]}).status_code == 400
    assert httpx.put(f"{root}/clock", json={"now": "soon"}).status_code == 400
    assert fresh.set_faults(error_rate=0.5)["error_rate"] == 0.5
    assert fresh.set_faults(drop_rate=0.1)["error_rate"] == 0.5  # changes merge
    assert fresh.set_faults(reset=True)["error_rate"] == 0.0
    assert httpx.get(f"{root}/nothing").status_code == 404
    assert httpx.get(fresh.url + "/elsewhere").status_code == 404


def test_cli_serves_and_waits():
    process = etl_process(
        "emulator", "serve", "--port", "0", "--objects", "1", "--log-level", "warning", stdout=None
    )
    try:
        line = process.stderr.readline()
        assert "listening on http://127.0.0.1:" in line and "demo" in line, line
        root = line.split("listening on ")[1].split(BASE)[0]
        waited = etl("emulator", "wait", "--url", root, "--timeout", "10")
        assert waited.returncode == 0
        assert (
            httpx.post(
                f"{root}{BASE}/auth/login", params={"username": "demo", "password": "demo"}
            ).status_code
            == 200
        )
    finally:
        process.terminate()
        process.wait(10)
    dead = etl("emulator", "wait", "--url", root, "--timeout", "0.3")
    assert dead.returncode == 1 and "did not answer" in dead.stderr


@pytest.mark.parametrize(
    "args",
    [["--params-per-object", "600"], ["--calc-per-object", "500"], ["--tls-cert", "PEM", "--tls-key", "PEM"]],
)
def test_serve_refuses_bad_settings_before_listening(tmp_path, args):
    pem = tmp_path / "bad.pem"
    pem.write_text("not a certificate")
    result = etl(
        "emulator", "serve", "--port", "0", *[str(pem) if a == "PEM" else a for a in args], timeout=60
    )
    assert result.returncode == 2 and "listening" not in result.stderr and "Traceback" not in result.stderr
    assert "Invalid value" in result.stderr
