"""Sign-in and the session it opens, as an httpx auth flow (httpx `Auth.async_auth_flow`).

The document shows how to sign in, not how the service answers a request without a live session.
`SessionAuth` takes 401, 403, any redirect (no documented operation redirects) and a sign-in page
served with 200 to mean "not signed in": it signs in again, once per ended session however many
requests that session refused, and sends the request again. A 403 is a missing right only when a
session opened after the first refusal refuses the request again while it still serves a cheap
documented request (the probe): never merely because it came soon after a sign-in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from email.utils import parsedate_to_datetime
from http.cookies import SimpleCookie
from typing import Any, Literal

import httpx
from pydantic import ValidationError

from etl.client.classify import is_html, raise_for_status
from etl.client.models import User
from etl.client.retry import ClientStats
from etl.client.series import decode_json
from etl.errors import AuthError, ConfigError, SessionRejected
from etl.support import redact
from etl.timeutil import now_ms

SignIn = Literal["query", "form"]
SESSION_COOKIES = ("SEMSESSIONID", "issToken")
SIGN_IN_PATH = "/auth/login"
PROBE_PATH = "/db/object/shortest"  # documented, cheap, and allowed to every login
SIGN_IN = "etl.sign_in"  # request extension: this request is a sign-in asked for by the caller
AS_IS = "etl.as_is"  # request extension: sent as it is, no session attached, its answer whatever it says
# Sessions one request may see end before it gives up to the retry policy. Short sessions under full
# concurrency end a few times in a row for an unlucky request; a server that refuses every fresh
# session must still be told apart in bounded time.
ROUNDS = 24
# Requests of one flow (a sign-in, the request and a probe per round): httpx counts them as redirects.
FLOW_REQUESTS = 3 * ROUNDS + 1
_ACCEPT = {"Accept": "application/json"}


def signed_out(response: httpx.Response) -> bool:
    """Whether an answer means "not signed in" (or a right is missing, for a 403: the flow finds out)."""
    status = response.status_code
    if status == 200:
        return _sign_in_page(response.content)
    return status in (401, 403) or 300 <= status < 400


def sign_in_request(
    base_url: str, username: str, password: str, way: SignIn, extensions: dict[str, Any] | None = None
) -> httpx.Request:
    """POST {base_url}/auth/login with the credentials as query parameters or as a form body."""
    credentials = {"username": username, "password": password}
    url = base_url + SIGN_IN_PATH
    if way == "form":
        return httpx.Request("POST", url, data=credentials, headers=_ACCEPT, extensions=extensions)
    return httpx.Request("POST", url, params=credentials, headers=_ACCEPT, extensions=extensions)


def session_cookie(response: httpx.Response) -> str | None:
    """The Cookie header of the session a sign-in answer opened (its values redacted from now on), or
    None when it did not set both session cookies."""
    cookies: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        cookies.load(header)
    values = {name: cookies[name].value for name in SESSION_COOKIES if name in cookies}
    if len(values) != len(SESSION_COOKIES):
        return None
    redact.register(*values.values())
    return "; ".join(f"{k}={v}" for k, v in values.items())


def _sign_in_page(body: bytes) -> bool:
    if not is_html(body):
        return False
    text = body.lower()
    return b"password" in text or b"login" in text


class SessionAuth(httpx.Auth):
    """Signs in, sends the two session cookies, and signs in again when an answer says the session ended."""

    def __init__(
        self, base_url: str, username: str, password: str, stats: ClientStats, sign_in: SignIn = "query"
    ) -> None:
        redact.register(password)
        redact.register_public(username)
        self.base_url = base_url
        self.username = username
        self._password = password
        self.sign_in = sign_in
        self.stats = stats
        self.user: User | None = None
        self.cookie: str | None = None  # the Cookie header of the live session
        self._signed_in = False  # once: later sign-ins are re-sign-ins
        # The server's clock less ours (ms), from the Date header of the last sign-in answer; None when the
        # server sent none. Date is whole seconds, cut down: the server's time is this or up to 1 s later.
        self.clock_offset: int | None = None
        self._lock = asyncio.Lock()  # one sign-in at a time; the others wait and use its session

    def sign_in_request(self, extensions: dict[str, Any]) -> httpx.Request:
        """A sign-in with the extensions of the request it opens a session for (its timeout), marked as one."""
        return sign_in_request(
            self.base_url, self.username, self._password, self.sign_in, {**extensions, SIGN_IN: True}
        )

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        if request.extensions.get(AS_IS):
            yield request
            return
        if request.extensions.get(SIGN_IN):
            async with self._lock:
                response = yield request
                await response.aread()
                self._accept(response)
            return
        refused: str | None = None  # the session that refused this request last
        for _ in range(ROUNDS):
            cookie = self.cookie
            if cookie is None:
                async with self._lock:
                    if self.cookie is None:  # else another request signed in while this one waited
                        if self._signed_in:
                            self.stats.relogins += 1
                        response = yield self.sign_in_request(request.extensions)
                        await response.aread()
                        self._accept(response)
                    cookie = self.cookie
            if cookie is None:  # _accept raises unless the answer opened a session
                raise SessionRejected("signed in, but no session was opened")
            request.headers["Cookie"] = cookie
            response = yield request
            await response.aread()
            if not signed_out(response):
                return
            if response.status_code == 403 and refused is not None:
                # Refused again, by a session opened since the first refusal: a missing right if that
                # session still serves others (sessions here only ever end, they never come back).
                probe = yield httpx.Request(
                    "GET",
                    self.base_url + PROBE_PATH,
                    headers={**_ACCEPT, "Cookie": cookie},
                    extensions=request.extensions,
                )
                await probe.aread()
                if probe.is_success and not signed_out(probe):
                    raise AuthError(
                        f"{request.method} {request.url.path}: refused (HTTP 403) by a live session: "
                        f"the login {self.username!r} lacks the right to do this"
                    )
            if self.cookie == cookie:
                self.cookie = None
            refused = cookie
        raise SessionRejected(  # the retry policy adds which request it was
            f"sessions refused it {ROUNDS} times in a row (last HTTP {response.status_code}), each right after "
            "signing in again"
        )

    def _accept(self, response: httpx.Response) -> None:
        """Take the session a sign-in answer opens, or say why there is none."""
        status = response.status_code
        if status in (400, 401, 403):
            sent, other = (
                ("a form-encoded body", "query") if self.sign_in == "form" else ("query parameters", "form")
            )
            raise AuthError(
                f"sign-in refused for user {self.username!r} (HTTP {status}): check the username and password; "
                f"they went as {sent}: if the service wants the other way, set source.sign_in: {other}"
            )
        if status == 404:
            raise ConfigError(
                f"sign-in: {redact.redact(self.base_url + SIGN_IN_PATH)} is not found (HTTP 404): the base URL "
                "(source.base_url or ETL_BASE_URL) probably lacks the service's base path, e.g. /sem-restservices"
            )
        raise_for_status(response, "sign-in")
        cookie = session_cookie(response)
        if cookie is None:
            raise AuthError("sign-in answered without the SEMSESSIONID and issToken session cookies")
        self.clock_offset = _clock_offset(response.headers.get("date"))
        body = decode_json(response.content)
        try:  # the user record is for show: an odd one does not stop the session
            self.user = User.model_validate(body) if isinstance(body, dict) and "id" in body else None
        except ValidationError:
            self.user = None
        self.cookie = cookie
        self._signed_in = True


def _clock_offset(date: str | None) -> int | None:
    """The server's clock less ours, in ms, from an HTTP Date header; None if there is none to read."""
    if not date:
        return None
    try:
        sent = parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError):
        return None
    if sent.tzinfo is None:  # RFC 9110 dates are GMT; an obsolete form without a zone is too
        return None
    return int(sent.timestamp() * 1000) - now_ms()
