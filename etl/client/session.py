"""Send -> classify -> retry, over one pooled httpx.AsyncClient whose auth flow keeps the session.

The send path, as httpx builds its own: `call` hands the request to one of the session's senders, which
sends it through the client (the auth flow of `etl.client.auth` signs in, attaches the session and signs
in again when a session ends), then `classify` turns the answer into a body or an error, then the body
is decoded. Only after a failure does `retry` take over; a request that succeeds at once never enters
its loop. `answer` sends a request the same way for callers that read the answer as it is (the probes of
`etl init` and `etl doctor`): without the session, not classified.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar, overload

import httpx
from aiolimiter import AsyncLimiter

from etl.client import classify, purpose, routes
from etl.client.answer_size import ACCEPT_ENCODING, BoundedTransport
from etl.client.auth import AS_IS, FLOW_REQUESTS, SIGN_IN, SessionAuth
from etl.client.concurrency import Limit, make_limit
from etl.client.models import User
from etl.client.options import DEFAULT, ClientOptions
from etl.client.retry import ClientStats, RateGate, retrying
from etl.client.series import decode_json
from etl.errors import InvalidResponse, NetworkError, RequestsSpent, ServerError, Throttled

# The deadline of the request this task is sending: a wait at the 429 gate does not count against it.
_DEADLINE: ContextVar[asyncio.Timeout | None] = ContextVar("etl_request_deadline", default=None)


_SENT = (
    "etl.sent"  # request extension: when it went on the wire (perf_counter), for the limit and `on_answer`
)
_PURPOSE = "etl.purpose"  # request extension: what it is for (client/purpose.py)
_SENT_BEFORE = "etl.sent_before"  # request extension: the auth flow sends it again (a session ended)


def _purpose_of(request: httpx.Request) -> str:
    """What a request on the wire counts as: a sign-in as the session's, a request sent again by the auth
    flow (after a session ended) as a retry, others as their caller said."""
    extensions = request.extensions
    if extensions.get(SIGN_IN) or _PURPOSE not in extensions:
        return purpose.SESSION
    if extensions.get(_SENT_BEFORE):
        return purpose.RETRIES
    extensions[_SENT_BEFORE] = True
    return str(extensions[_PURPOSE])


# Answers that refuse a request for the server's load: the limit is cut (a timeout cuts it too).
_LOAD_STATUSES = frozenset({429, 503})


_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")
T = TypeVar("T")
# A query parameter's value as httpx takes it (a sequence: the parameter repeated; None: left out).
Primitive = str | int | float | bool | None
Query = Primitive | Sequence[Primitive]
Params = Mapping[str, Query]


def _url(url: str, params: Params | None) -> tuple[str, Params | None]:
    """(url, params) for httpx: plain values (every series request: `count=N`) go into the URL as httpx
    would encode them, so that it parses one URL instead of parsing one and merging a query into it."""
    if not params:
        return url, None
    if isinstance(params, dict) and all(
        _PLAIN.fullmatch(k)
        and (type(v) is int or (type(v) is str and _PLAIN.fullmatch(v)))  # not bool, not a list
        for k, v in params.items()
    ):
        return url + "?" + "&".join(f"{k}={v}" for k, v in params.items()), None
    return url, params


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        pass


_NO_COOKIES = _NoCookies()


class _Client(httpx.AsyncClient):
    """httpx's client without a cookie jar. The auth flow sends the two session cookies itself; a jar
    would also keep rememberMe and language and share cookies across hosts. And httpx reads every
    answer's Set-Cookie into its jar through urllib's request and response objects, even into a jar
    that keeps nothing, on the event loop for every request of a run."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise TypeError("etl's client keeps no cookies: the session sends its own")


class Session:
    """One signed-in session over a pooled httpx.AsyncClient; `call` returns decoded JSON."""

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        options: ClientOptions = DEFAULT,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        stats: ClientStats | None = None,
    ) -> None:
        """`transport` replaces the network (tests, recorded answers; no proxy then); its answers are read
        within the options' `max_answer_bytes` too."""
        self.base_url = base_url.rstrip("/")
        self.options = options
        # `timeout` bounds each read; this, the whole exchange (a body that drips in never ends a read).
        self.request_timeout = options.request_timeout
        self.username = username
        self.policy = options.retry
        self.stats = stats or ClientStats()
        self.gate = RateGate(self.stats)
        self.auth = SessionAuth(self.base_url, username, password, self.stats, options.sign_in)
        # What admits requests (the senders), and nothing else: fixed, or learned from the answers; a
        # run whose source is shared with other processes puts its part of a budget here instead.
        self.limit: Limit = make_limit(
            options.auto_concurrency, options.max_in_flight, options.start_in_flight, self.stats.capacity
        )
        self._rate = None if options.max_rps is None else AsyncLimiter(1, 1 / options.max_rps)
        self._queue: deque[_Job] = deque()
        self._senders: set[asyncio.Task[None]] = set()
        self._on_wire = 0  # exchanges under way
        carriers = (
            routes.transports(options)
            if transport is None
            else routes.Transports(BoundedTransport(transport, options.max_answer_bytes), {})
        )
        self._http = _Client(
            auth=self.auth,
            timeout=options.timeout,
            verify=options.verify,
            transport=carriers.direct,
            mounts=carriers.mounts,
            limits=options.limits,
            headers={"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING},
            follow_redirects=False,  # a redirect means "not signed in" here (the auth flow)
            max_redirects=FLOW_REQUESTS,  # httpx counts an auth flow's extra requests as redirects
            event_hooks=(
                {"request": [self._on_the_wire]}
                if options.on_answer is None
                else {"request": [self._on_the_wire], "response": [self._answered]}
            ),
        )

    @property
    def max_in_flight(self) -> int:
        """The requests that may be on the wire at once now."""
        return self.limit.current

    @property
    def demand(self) -> int:
        """The requests waiting for a sender or on the wire."""
        return len(self._queue) + self._on_wire

    @property
    def on_wire(self) -> int:
        return self._on_wire

    def admit(self) -> None:
        """Senders for the waiting requests, as many as the limit admits now: for a limit that grows
        without an answer of this session's (a budget's grant, etl/client/budget.py)."""
        for _ in range(min(len(self._queue), self.limit.current - len(self._senders))):
            self._senders.add(asyncio.ensure_future(self._sender()))

    @property
    def user(self) -> User | None:
        return self.auth.user

    async def aclose(self) -> None:
        await self._http.aclose()

    async def sign_in(self) -> User | None:
        """Sign in now (a new session), retried like any request."""
        extensions = {SIGN_IN: True, "timeout": self._http.timeout.as_dict()}

        async def once() -> User | None:
            await self._send(self.auth.sign_in_request(extensions))
            return self.auth.user

        return await retrying(once, self.policy, self.stats, "POST /auth/login")

    @overload
    async def call(
        self, method: str, path: str, params: Params | None = None, *, expect_json: bool = True
    ) -> Any: ...  # decoded JSON, or None for an empty answer where that is fine (not expect_json)

    @overload
    async def call(
        self,
        method: str,
        path: str,
        params: Params | None = None,
        *,
        decode: Callable[[bytes], T],
        in_thread_over: int | None = None,
    ) -> T: ...

    async def call(
        self,
        method: str,
        path: str,
        params: Params | None = None,
        *,
        expect_json: bool = True,
        decode: Callable[[bytes], Any] = decode_json,
        in_thread_over: int | None = None,
    ) -> Any:
        """The answer's body through `decode` (JSON by default); in a thread of the loop's pool for bodies
        over `in_thread_over` bytes (for decoders that release the GIL on large bodies). An
        InvalidResponse from it is retried like a bad status. Throttled (429) to the end while other
        requests got through, it raises `Throttled`, which ends only its own work."""
        passed = self.gate.passed
        attempts = iter((purpose.current(),))  # then retries

        def attempt() -> Any:
            return self._attempt(
                method, path, params, expect_json, decode, in_thread_over, next(attempts, purpose.RETRIES)
            )

        try:
            return await retrying(
                attempt,
                self.policy,
                self.stats,
                f"{method} {path}",
            )
        except ServerError as exc:
            if exc.status == 429 and self.gate.passed > passed:
                raise Throttled(str(exc), 429, exc.retry_after) from None
            raise

    async def answer(self, request: httpx.Request) -> httpx.Response:
        """The answer to `request` as the server gives it, for callers that read what it says (how a
        server answers a sign-in, an unknown id, a call without a session): sent as it is (with the client's
        default headers), without the session (it carries its own Cookie if it needs one), and not
        classified. Retried by the policy
        like any request after a network failure or a 5xx or 429; when the policy gives up on such a
        status, the last answer is returned."""
        request.extensions[AS_IS] = True
        request.extensions.setdefault(_PURPOSE, purpose.current())
        request.extensions.setdefault("timeout", self._http.timeout.as_dict())
        for name, value in self._http.headers.items():
            request.headers.setdefault(name, value)
        last: httpx.Response | None = None

        async def once() -> httpx.Response:
            nonlocal last
            last = await self._send(request)
            if last.status_code in classify.RETRYABLE_STATUSES:
                self._classified(last, request.method, request.url.path, False)  # raises, notes a 429
            return last

        try:
            return await retrying(once, self.policy, self.stats, f"{request.method} {request.url.path}")
        except ServerError:
            if last is None or last.status_code not in classify.RETRYABLE_STATUSES:
                raise
            return last

    # -- one attempt -------------------------------------------------------------------------

    async def _attempt(
        self,
        method: str,
        path: str,
        params: Params | None,
        expect_json: bool,
        decode: Callable[[bytes], Any],
        in_thread_over: int | None,
        what: str,
    ) -> Any:
        url, params = _url(self.base_url + path, params)
        request = self._http.build_request(method, url, params=params)
        request.extensions[_PURPOSE] = what
        try:
            response = await self._send(request)
            body = self._classified(response, method, path, expect_json)
            self.gate.answered()
            if body is None:
                return None
            if in_thread_over is not None and len(body) > in_thread_over:
                # The loop's own pool, which `etl run` sizes to the cores and also writes with: a pool
                # of decoders beside it only added threads taking turns for the GIL.
                return await asyncio.get_running_loop().run_in_executor(None, decode, body)
            return decode(body)
        except InvalidResponse as exc:
            if str(exc).startswith(f"{method} {path}: "):
                raise
            raise type(exc)(f"{method} {path}: {exc}") from None

    async def _on_the_wire(self, request: httpx.Request) -> None:
        """Every request, sign-ins and resends of the auth flow included: held while a 429 pauses the
        client and within `max_rps` (the request's own deadline starts again after those waits), counted
        (and not sent past `options.max_requests`), and stamped with the time it goes."""
        waited = await self.gate.wait()
        if self._rate is not None:
            waited = not self._rate.has_capacity() or waited
            await self._rate.acquire()
        budget = self.options.max_requests
        if budget is not None and self.stats.requests >= budget:  # counted below with no await between
            raise RequestsSpent(
                f"{request.method} {request.url.path}: not sent, the {budget} request(s) allowed are spent"
            )
        if waited and (deadline := _DEADLINE.get()) is not None:
            deadline.reschedule(asyncio.get_running_loop().time() + (self.request_timeout or 0))
        self.stats.requests += 1
        self.stats.purposes[_purpose_of(request)] += 1
        request.extensions[_SENT] = time.perf_counter()

    async def _answered(self, response: httpx.Response) -> None:
        """Every answer (its body already read by the transport), timed for `options.on_answer`."""
        assert self.options.on_answer is not None
        self.options.on_answer(response.request, time.perf_counter() - response.request.extensions[_SENT])

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """The answer to `request`, sent by one of at most `limit.current` senders (tasks that live while
        requests wait; one over the limit when it falls ends after its exchange, and more start when it
        grows). A sender that gets an answer sends the next waiting request in the same step of
        the event loop, before the task that asked for the answer handles it. Answers that come together
        (after the same latency) thus send the next requests first and are handled while those are on
        the wire; behind a semaphore, each next request waited for the handling of every answer of the
        burst."""
        job = _Job(request)
        self._queue.append(job)
        if len(self._senders) < self.limit.current:
            self._senders.add(asyncio.ensure_future(self._sender()))
        try:
            return await job.answer
        except asyncio.CancelledError:
            job.abandon()
            raise
        except TimeoutError:
            raise NetworkError(
                f"no complete answer within {self.request_timeout:g}s (source.request_timeout)",
                reason="timeout",
            ) from None
        except httpx.TransportError as exc:
            raise classify.transport_error(exc, self.base_url) from None
        except ServerError as exc:  # a sign-in the auth flow made was throttled or failed
            self._throttle(exc)
            raise

    async def _sender(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        try:
            while self._queue and len(self._senders) <= self.limit.current:
                job = self._queue.popleft()
                if job.abandoned:
                    continue
                job.sender = me
                try:
                    response = await self._exchange(job.request)
                except asyncio.CancelledError:
                    if not job.abandoned:  # the sender itself was stopped (its loop is closing)
                        job.answer.cancel()
                        raise
                    me.uncancel()
                except BaseException as exc:
                    if not job.answer.done():
                        job.answer.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                else:
                    if not job.answer.done():
                        job.answer.set_result(response)
                finally:
                    job.sender = None
                for _ in range(min(len(self._queue) - 1, self.limit.current - len(self._senders))):
                    self._senders.add(asyncio.ensure_future(self._sender()))  # the limit grew
        finally:
            # At once, not in a done callback: a request queued meanwhile must see the room it leaves.
            self._senders.discard(me)

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        """One request on the wire: after the 429 gate, within `request_timeout`; what it took and how it
        ended told to the limit."""
        await self.gate.wait()
        self._on_wire += 1
        in_flight, started = self._on_wire, time.perf_counter()
        try:
            async with asyncio.timeout(self.request_timeout) as deadline:
                _DEADLINE.set(deadline if self.request_timeout else None)  # this sender's own context
                response = await self._http.send(request)
        except (TimeoutError, httpx.TimeoutException):
            sent = request.extensions.get(_SENT, started)
            self.limit.dropped(sent, time.perf_counter() - sent, False)
            raise
        finally:
            self._on_wire -= 1
        sent = response.request.extensions.get(_SENT, started)  # the last request of an auth flow
        if response.status_code in _LOAD_STATUSES:
            self.limit.dropped(sent, time.perf_counter() - sent, True)
        elif response.status_code < 300:
            self.limit.succeeded(sent, time.perf_counter() - sent, in_flight)
        self.stats.bytes_received += len(response.content)
        # An httpx Response and its (consumed) stream refer to each other, so only the cyclic GC would
        # free the answer and its body; a run makes too few objects for that to come often, and the
        # bodies would pile up. Without the loop each answer is freed as soon as it is decoded.
        response.stream = httpx.ByteStream(response.content)
        return response

    def _classified(
        self, response: httpx.Response, method: str, path: str, expect_json: bool
    ) -> bytes | None:
        try:
            return classify.body_of(response, method, path, expect_json)
        except ServerError as exc:
            self._throttle(exc)
            raise

    def _throttle(self, error: ServerError) -> None:
        if error.status == 429:
            self.gate.pause(self.policy.honoured(error.retry_after))


class _Job:
    """A request waiting for a sender, then on the wire (`sender` set); `answer` is its Response or its
    error. Cancelling the asking task cancels `answer` as well (asyncio cancels what a task awaits)."""

    __slots__ = ("request", "answer", "sender", "abandoned")

    def __init__(self, request: httpx.Request) -> None:
        self.request = request
        self.answer: asyncio.Future[httpx.Response] = asyncio.get_running_loop().create_future()
        self.sender: asyncio.Task[None] | None = None
        self.abandoned = False

    def abandon(self) -> None:
        """The asking task was cancelled: the request is not sent, or its exchange is cancelled."""
        self.abandoned = True
        if self.sender is not None:
            self.sender.cancel()
        elif self.answer.done() and not self.answer.cancelled():
            self.answer.exception()  # retrieved: no "never retrieved" warning for an answer nobody awaits
