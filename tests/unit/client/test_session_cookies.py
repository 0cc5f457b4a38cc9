"""The session sends its two session cookies and nothing else a server sets (etl/client/session.py)."""

from __future__ import annotations

import asyncio

import httpx

from etl.client.session import Session


def test_only_the_session_cookies_are_sent_whatever_the_answers_set():
    sent: list[str | None] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("cookie"))
        cookies = [("set-cookie", "rememberMe=r1; Path=/"), ("set-cookie", "language=en; Path=/")]
        if request.url.path == "/auth/login":
            cookies += [("set-cookie", "SEMSESSIONID=s1; Path=/"), ("set-cookie", "issToken=t1; Path=/")]
            return httpx.Response(200, json={"id": 1, "login": "demo"}, headers=cookies)
        return httpx.Response(200, json=[], headers=cookies)

    async def go() -> None:
        s = Session("http://server", "demo", "pw", transport=httpx.MockTransport(server))
        await s.call("GET", "/db/object")
        await s.call("GET", "/db/object")
        await s.aclose()

    asyncio.run(go())
    assert sent == [None, "SEMSESSIONID=s1; issToken=t1", "SEMSESSIONID=s1; issToken=t1"]
