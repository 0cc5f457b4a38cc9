"""Answers read as they are (`Session.answer`, what the probes of `etl init` and `etl doctor` send): no
session attached, no classification, the retry policy for network failures and 5xx/429; and every answer
timed for `ClientOptions.on_answer` (etl/client/session.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from etl.client import ClientOptions, RetryPolicy
from etl.client.auth import sign_in_request
from etl.client.session import Session
from etl.errors import NetworkError

QUICK = RetryPolicy(attempts=3, backoff_initial=0.001, backoff_max=0.002)


def session(server: Callable[[httpx.Request], httpx.Response], **options: Any) -> Session:
    return Session(
        "http://server/api",
        "demo",
        "pw",
        ClientOptions(retry=QUICK, **options),
        transport=httpx.MockTransport(server),
    )


def test_an_answer_comes_as_it_is_without_the_session():
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404, text="<html>no such object</html>")

    async def go() -> httpx.Response:
        s = session(server)
        try:
            return await s.answer(
                httpx.Request("GET", "http://server/api/db/object/1", headers={"Cookie": "a=b"})
            )
        finally:
            await s.aclose()

    response = asyncio.run(go())
    assert response.status_code == 404 and response.text == "<html>no such object</html>"
    [request] = seen  # no sign-in before it, none after it
    assert request.headers["cookie"] == "a=b" and request.headers["accept"] == "application/json"


def test_a_5xx_is_retried_and_the_last_one_returned_when_the_policy_gives_up():
    statuses = iter([503, 200, 500, 500, 500])
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(next(statuses), json={})

    async def go() -> tuple[int, int]:
        s = session(server)
        try:
            first = await s.answer(sign_in_request("http://server/api", "demo", "pw", "form"))
            second = await s.answer(httpx.Request("GET", "http://server/api/db/object/shortest"))
            return first.status_code, second.status_code
        finally:
            await s.aclose()

    assert asyncio.run(go()) == (200, 500)
    assert seen == ["/api/auth/login"] * 2 + ["/api/db/object/shortest"] * 3


def test_a_failed_connection_is_retried_then_one_network_error():
    def server(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async def go() -> None:
        s = session(server)
        try:
            await s.answer(httpx.Request("GET", "http://server/api/db/object/shortest"))
        finally:
            await s.aclose()

    with pytest.raises(
        NetworkError, match=r"gave up after 3 attempt\(s\).*connection failed to http://server/api"
    ):
        asyncio.run(go())


def test_every_answer_is_timed_sign_ins_included():
    timed: list[tuple[str, str, float]] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/auth/login"):
            cookies = [("set-cookie", "SEMSESSIONID=s; Path=/"), ("set-cookie", "issToken=t; Path=/")]
            return httpx.Response(200, json={"id": 1, "login": "demo"}, headers=cookies)
        return httpx.Response(200, json=[])

    async def go() -> None:
        s = session(server, on_answer=lambda r, seconds: timed.append((r.method, r.url.path, seconds)))
        try:
            await s.call("GET", "/db/object/shortest")
            await s.answer(httpx.Request("GET", "http://server/api/db/object/7"))
        finally:
            await s.aclose()

    asyncio.run(go())
    assert [(m, p) for m, p, _ in timed] == [
        ("POST", "/api/auth/login"),
        ("GET", "/api/db/object/shortest"),
        ("GET", "/api/db/object/7"),
    ]
    assert all(seconds >= 0 for *_, seconds in timed)
