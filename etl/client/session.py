"""Sign-in, session cookies, one re-sign-in when a session is rejected, and what each answer means."""

from __future__ import annotations

import asyncio
import email.utils
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.cookiejar import CookieJar, DefaultCookiePolicy
from http.cookies import SimpleCookie
from typing import Any

import httpx
from tenacity import RetryError

from etl import redact
from etl.client.models import User
from etl.client.retry import RETRYABLE_STATUSES, ClientStats, RateGate, RetryPolicy, retrying
from etl.client.series import decode_json
from etl.errors import (
    ApiError,
    AuthError,
    InvalidResponse,
    NetworkError,
    NotFound,
    RequestRejected,
    RetriesExhausted,
    ServerError,
    SessionRejected,
    TlsError,
)

SESSION_COOKIES = ("SEMSESSIONID", "issToken")


class _SessionRejected(Exception):
    """The server wants a new sign-in (401/403, a redirect or an HTML login page)."""

    def __init__(self, definite: bool):
        super().__init__()
        self.definite = definite  # 401/403; an HTML page may also be plain garbage


def _excerpt(response: httpx.Response, size: int = 120) -> str:
    text = response.content[:size].decode("utf-8", "replace")
    return redact.redact(" ".join(text.split()))


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _tls_failure(exc: BaseException) -> str | None:
    """The certificate problem behind a connection error, if that is what it was."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return cause.verify_message or cause.reason or "certificate verify failed"
        cause = cause.__cause__ or cause.__context__
    return None


def _looks_like_html(body: bytes) -> bool:
    return body.lstrip()[:1] == b"<"


class Session:
    """One signed-in session over a pooled httpx.AsyncClient; `call` returns decoded JSON."""

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        timeout: httpx.Timeout | float = 30.0,
        retry: RetryPolicy | None = None,
        max_in_flight: int = 16,
        verify: bool | ssl.SSLContext = True,
        transport: httpx.AsyncBaseTransport | None = None,
        stats: ClientStats | None = None,
    ) -> None:
        redact.register(password)
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._password = password
        self.policy = retry or RetryPolicy()
        self.stats = stats or ClientStats()
        self.gate = RateGate(self.stats)
        self.user: User | None = None
        self._cookie_header: str | None = None
        self._generation = 0  # bumped at each sign-in, so concurrent rejections sign in once
        self._login_lock = asyncio.Lock()
        self._in_flight = asyncio.Semaphore(max_in_flight)
        # Decoders that release the GIL run here, beside the event loop. Two threads parse faster than
        # one loop downloads; more would only add per-thread allocator caches to the peak memory.
        self._decoders = ThreadPoolExecutor(max_workers=2, thread_name_prefix="etl-decode")
        self._http = httpx.AsyncClient(
            timeout=timeout,
            verify=verify,
            transport=transport,
            limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight),
            # We send the two session cookies ourselves; a jar would also keep rememberMe/language
            # and share cookies across hosts.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            headers={"Accept": "application/json"},
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._http.aclose()
        self._decoders.shutdown(wait=False, cancel_futures=True)

    # -- public ------------------------------------------------------------------------------

    async def sign_in(self) -> User:
        async with self._login_lock:
            return await self._retried("POST /auth/login", self._sign_in_once)

    async def call(
        self, method: str, path: str, params: Any = None, *, expect_json: bool = True,
        decode: Callable[[bytes], Any] = decode_json, in_thread: bool = False,
    ) -> Any:
        """The answer's body through `decode` (JSON by default), in a decoder thread if asked (for
        decoders that release the GIL); an InvalidResponse from it is retried like a bad status."""
        return await self._retried(
            f"{method} {path}", lambda: self._call_once(method, path, params, expect_json, decode, in_thread)
        )

    # -- internals ---------------------------------------------------------------------------

    async def _retried(self, what: str, once):
        started = time.monotonic()
        try:
            async for attempt in retrying(self.policy, self.stats):
                with attempt:
                    return await once()
        except RetryError as exc:
            last = exc.last_attempt.exception()
            attempts = exc.last_attempt.attempt_number
            cause = str(last).removeprefix(f"{what}: ")
            raise RetriesExhausted(
                redact.redact(
                    f"{what}: gave up after {attempts} attempt(s) in {time.monotonic() - started:.1f}s: {cause}"
                ),
                last,
                attempts,
            ) from None

    async def _send(self, method: str, path: str, params: Any, *, with_session: bool) -> httpx.Response:
        headers = {"Cookie": self._cookie_header} if with_session and self._cookie_header else None
        async with self._in_flight:
            # Past the gate only with a slot: requests queued for one must also wait out a 429.
            await self.gate.wait()
            self.stats.requests += 1
            try:
                response = await self._http.request(method, self.base_url + path, params=params, headers=headers)
            except httpx.TimeoutException as exc:
                raise NetworkError(f"timed out ({type(exc).__name__})", reason="timeout") from None
            except httpx.TransportError as exc:
                if (tls := _tls_failure(exc)) is not None:
                    raise TlsError(
                        f"TLS: cannot verify the server {self.base_url}: {tls}; if it uses a private CA, "
                        "set source.ca_bundle to that CA's PEM file"
                    ) from None
                detail = redact.redact(str(exc))[:160] or type(exc).__name__
                raise NetworkError(f"connection failed to {self.base_url}: {detail}", reason="connection") from None
        self.stats.bytes_received += len(response.content)
        # An httpx Response and its (consumed) stream refer to each other, so only the cyclic GC would
        # free the answer and its body; a run makes too few objects for that to come often, and the
        # bodies would pile up. Without the loop each answer is freed as soon as it is decoded.
        response.stream = httpx.ByteStream(response.content)
        return response

    def _raise_for_status(self, response: httpx.Response, what: str) -> None:
        status = response.status_code
        if status < 300:
            return
        if status in RETRYABLE_STATUSES:
            retry_after = _retry_after(response)
            if status == 429:
                self.gate.pause(retry_after if retry_after is not None else 1.0)
            raise ServerError(f"{what}: HTTP {status} ({_excerpt(response, 60)})", status, retry_after)
        if status == 404:
            raise NotFound(f"{what}: not found (HTTP 404)", 404, _excerpt(response))
        raise RequestRejected(f"{what}: rejected with HTTP {status}: {_excerpt(response)}", status, _excerpt(response))

    async def _sign_in_once(self) -> User:
        response = await self._send(
            "POST", "/auth/login", {"username": self.username, "password": self._password}, with_session=False
        )
        if response.status_code in (400, 401, 403):
            raise AuthError(
                f"sign-in refused for user {self.username!r} (HTTP {response.status_code}): "
                "check the username and password"
            )
        self._raise_for_status(response, "sign-in")
        cookies = SimpleCookie()
        for header in response.headers.get_list("set-cookie"):
            cookies.load(header)
        values = {name: cookies[name].value for name in SESSION_COOKIES if name in cookies}
        if len(values) != len(SESSION_COOKIES):
            raise AuthError("sign-in answered without the SEMSESSIONID and issToken session cookies")
        redact.register(*values.values())
        body = decode_json(response.content)
        self.user = User.model_validate(body) if isinstance(body, dict) and "id" in body else None
        self._cookie_header = "; ".join(f"{k}={v}" for k, v in values.items())
        self._generation += 1
        return self.user

    async def _ensure_session(self, rejected_generation: int | None = None) -> None:
        async with self._login_lock:
            if rejected_generation is None and self._generation:
                return
            if rejected_generation is not None and rejected_generation != self._generation:
                return  # another request already signed in again
            if rejected_generation is not None:
                self.stats.relogins += 1
            await self._sign_in_once()

    async def _call_once(
        self, method: str, path: str, params: Any, expect_json: bool, decode: Callable[[bytes], Any],
        in_thread: bool,
    ) -> Any:
        await self._ensure_session()
        what = f"{method} {path}"
        for signed_in_again in (False, True):
            generation = self._generation
            response = await self._send(method, path, params, with_session=True)
            try:
                body = self._body(response, what, expect_json)
            except _SessionRejected as rejected:
                if signed_in_again and not rejected.definite:
                    raise InvalidResponse(f"{what}: answered an HTML page instead of JSON") from None
                if signed_in_again:
                    # A 403 from a fresh session is a missing right, final; a 401 (or a redirect to the
                    # login page) may be a short-lived session expiring in the queue: retried.
                    refused = AuthError if response.status_code == 403 else SessionRejected
                    raise refused(
                        f"{what}: session rejected (HTTP {response.status_code}) "
                        "right after signing in again; does this login have the rights?"
                    ) from None
                await self._ensure_session(rejected_generation=generation)
                continue
            if body is None:
                return None
            try:
                if in_thread:
                    return await asyncio.get_running_loop().run_in_executor(self._decoders, decode, body)
                return decode(body)
            except InvalidResponse as exc:
                raise InvalidResponse(f"{what}: {exc}") from None
        raise AssertionError("unreachable")

    def _body(self, response: httpx.Response, what: str, expect_json: bool) -> bytes | None:
        """The body of an answer that is worth decoding (None: an empty one where that is fine)."""
        status = response.status_code
        if status in (401, 403):
            raise _SessionRejected(definite=True)
        if 300 <= status < 400:
            if "login" in response.headers.get("location", "").lower():
                raise _SessionRejected(definite=True)
            raise RequestRejected(f"{what}: unexpected redirect (HTTP {status})", status)
        self._raise_for_status(response, what)
        body = response.content
        if _looks_like_html(body):
            if b"password" in body.lower() or b"login" in body.lower():
                raise _SessionRejected(definite=False)
            raise InvalidResponse(f"{what}: answered an HTML page instead of JSON")
        if not body.strip():
            if expect_json:
                raise InvalidResponse(f"{what}: empty answer")
            return None
        return body


__all__ = ["Session", "ApiError"]
