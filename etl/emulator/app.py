"""The emulator as a raw ASGI app: every endpoint of the document under the base path, plus the
control API under /_emulator. Raw ASGI (no framework) keeps the per-request cost low; series
bodies are formatted with numpy and kept in a bounded LRU cache."""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import hmac
import logging
import os
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import numpy as np
import orjson

from etl.emulator import data
from etl.emulator.data import DAY_MS, Dataset, Param
from etl.emulator.faults import LOGIN_PAGE, Decision, FaultPlan, error_page, hostile_body, retry_after_header

if TYPE_CHECKING:
    from etl.emulator.server import EmulatorConfig

COUNT_DEFAULT = 10_000
COUNT_MAX = 100_000
REQUEST_LOG_MAX = 100_000  # entries kept in memory (oldest dropped)
CACHE_MAX_BYTES = 256 * 1024 * 1024
CACHE_MAX_ENTRY = 16 * 1024 * 1024
SEEN_MAX = 100_000
CONFIG_ENV = "ETL_EMULATOR_CONFIG"
SECRET_ENV = "ETL_EMULATOR_SECRET"  # shared by worker processes
JSON = b"application/json"
_DROP_MESSAGE = "ASGI callable returned without completing response."


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, answer: Answer | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.answer = answer  # sent instead of the JSON error body (an ended session's redirect or page)

    def body(self) -> bytes:
        return orjson.dumps({"error": self.code, "message": self.message, "status": self.status})


def _not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found")


def _bad(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


# -- fast JSON for point series ----------------------------------------------------------------------
# A point is one fixed-width record, `{"timestmp":"<date>T<time>.<ms>Z","value":<number>},`, assembled
# from lookup tables with numpy; numbers are right-aligned with spaces (JSON whitespace) to the widest
# integer part of the answer, so nothing has to be squeezed out afterwards.

def _digits(width: int) -> np.ndarray:
    """(10**width, width) uint8: the zero-padded ASCII digits of 0..10**width-1."""
    return (np.arange(10**width)[:, None] // 10 ** np.arange(width - 1, -1, -1) % 10 + 48).astype(np.uint8)


def _time_table() -> np.ndarray:
    """"THH:MM:SS." for every second of a day."""
    s = np.arange(86400)
    d2 = _digits(2)
    col = lambda c: np.full((86400, 1), ord(c), np.uint8)  # noqa: E731
    parts = [col("T"), d2[s // 3600], col(":"), d2[s // 60 % 60], col(":"), d2[s % 60], col(".")]
    return np.ascontiguousarray(np.concatenate(parts, axis=1)).view("S10").ravel()


def _number_tables(width: int) -> np.ndarray:
    """S(width+2) "  -12." for the integer parts 0..10**width-1, then the same negated."""
    digits = _digits(width)
    lead = (np.arange(10**width)[:, None] < 10 ** np.arange(width - 1, -1, -1)) & (np.arange(width) < width - 1)
    digits[lead] = 32
    first = np.argmin(lead, axis=1)  # column of the first digit
    pos = np.concatenate([np.full((10**width, 1), 32, np.uint8), digits, np.full((10**width, 1), 46, np.uint8)], 1)
    neg = pos.copy()
    neg[np.arange(10**width), first] = 45  # '-' right before the first digit
    return np.ascontiguousarray(np.concatenate([pos, neg])).view(f"S{width + 2}").ravel()


_TIME = _time_table()
_MS = np.ascontiguousarray(np.concatenate(
    [_digits(3), np.tile(np.frombuffer(b'Z","value":', np.uint8), (1000, 1))], axis=1)).view("S14").ravel()
_INT = {w: _number_tables(w) for w in (1, 2, 3, 4)}
_FRAC = np.ascontiguousarray(np.concatenate(
    [_digits(3), np.tile(np.frombuffer(b"},", np.uint8), (1000, 1))], axis=1)).view("S5").ravel()


@functools.lru_cache(maxsize=65536)
def _date(day: int) -> bytes:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat().encode()


def _stamp_parts(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point: "YYYY-MM-DD", "THH:MM:SS.", "mmmZ\",\"value\":" (years 1..9999)."""
    days = ts // DAY_MS
    ms_of_day = ts - days * DAY_MS
    seconds = ms_of_day // 1000
    first = int(days.min())
    dates = np.array([_date(d) for d in range(first, int(days.max()) + 1)], "S10")
    return dates.take(days - first), _TIME.take(seconds), _MS.take(ms_of_day - seconds * 1000)


def iso_strings(ts: np.ndarray) -> list[str]:
    """ISO 8601 UTC strings with milliseconds of epoch ms."""
    if not len(ts):
        return []
    rows = np.empty(len(ts), [("date", "S10"), ("time", "S10"), ("ms", "S3")])
    rows["date"], rows["time"], ms = _stamp_parts(ts)
    rows["ms"] = ms.astype("S3")
    return [s + "Z" for s in rows.view("S23").astype(str).tolist()]


def encode_points(param_id: int, ts: np.ndarray, values: np.ndarray) -> bytes:
    """`{"id": .., "points": [{"timestmp": ISO, "value": v}, ..]}`, built column-wise with numpy for
    values with at most 3 decimals and |v| < 10000; anything else goes through orjson."""
    head = b'{"id":%d,"points":[' % param_id
    if not len(ts):
        return head + b"]}"
    milli = np.rint(values * 1000)
    top = np.abs(milli).max()
    if not (top < 1e7 and (milli / 1000 == values).all()):  # also false for NaN
        points = [{"timestmp": s, "value": v} for s, v in zip(iso_strings(ts), values.tolist(), strict=True)]
        return orjson.dumps({"id": param_id, "points": points})
    width = len(str(int(top) // 1000))
    milli = milli.astype(np.int64)
    magnitude = np.abs(milli)
    whole = magnitude // 1000
    rows = np.empty(len(ts), [("head", "S13"), ("date", "S10"), ("time", "S10"), ("ms", "S14"),
                              ("int", f"S{width + 2}"), ("frac", "S5")])
    rows["head"] = b'{"timestmp":"'
    rows["date"], rows["time"], rows["ms"] = _stamp_parts(ts)
    rows["int"] = _INT[width].take(whole + (milli < 0) * 10**width)
    rows["frac"] = _FRAC.take(magnitude - whole * 1000)
    return b"".join((head, rows.view(np.uint8)[:-1], b"]}"))


def encode_candles(param_id: int, b: np.ndarray, o, h, lo, c) -> bytes:
    keys = ("timestmp", "open", "close", "low", "high")
    rows = [dict(zip(keys, row, strict=True))
            for row in zip(b.tolist(), o.tolist(), c.tolist(), lo.tolist(), h.tolist(), strict=True)]
    return orjson.dumps({"id": param_id, "candles": rows})


# -- state -------------------------------------------------------------------------------------------

@dataclass
class User:
    index: int
    login: str
    password: str
    objects: frozenset[int] | None  # None: every object
    control: bool = True  # may set values and run commands

    def sees(self, object_id: int) -> bool:
        return self.objects is None or object_id in self.objects

    def require_control(self) -> None:
        if not self.control:
            raise ApiError(403, "forbidden", f"login {self.login!r} may read but not act on equipment")


@dataclass
class Session:
    """What this process knows of a session: the rest is in its signed id."""

    user: User
    token: str
    created: float  # epoch seconds
    served: int = 0
    spent: bool = False


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    args: tuple[int, ...]
    user: User | None = None
    decision: Decision | None = None

    def one(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def integer(self, name: str, default: int | None = None) -> int | None:
        value = self.one(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise _bad(f"{name} must be an integer, got {value!r}") from None

    def integers(self, name: str) -> list[int]:
        try:
            return [int(v) for values in self.query.get(name, []) for v in values.split(",") if v]
        except ValueError:
            raise _bad(f"{name} must hold integers") from None

    def strings(self, name: str) -> list[str]:
        return [v for values in self.query.get(name, []) for v in values.split(",") if v]

    def flag(self, name: str) -> bool | None:
        value = self.one(name)
        if value is None or value == "":
            return None
        if value.lower() in ("true", "1"):
            return True
        if value.lower() in ("false", "0"):
            return False
        raise _bad(f"{name} must be true or false, got {value!r}")


@dataclass
class Answer:
    body: bytes
    status: int = 200
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass
class Route:
    method: str
    template: str
    handler: Callable[[Request], Answer | bytes]
    sign_in: bool = False
    series: tuple[str, str] | None = None  # (source, kind)


class Router:
    """Routes by segment count and literal segments; integer segments are parsed (400 if not)."""

    def __init__(self, routes: list[Route]) -> None:
        self._by_len: dict[int, list[tuple[tuple[tuple[int, str], ...], tuple[int, ...], Route]]] = {}
        for route in routes:
            segs = route.template.strip("/").split("/")
            literals = tuple((i, s) for i, s in enumerate(segs) if not s.startswith("{"))
            params = tuple(i for i, s in enumerate(segs) if s.startswith("{"))
            self._by_len.setdefault(len(segs), []).append((literals, params, route))
        for candidates in self._by_len.values():
            candidates.sort(key=lambda c: -len(c[0]))

    def match(self, method: str, path: str) -> tuple[Route, tuple[int, ...]]:
        segs = path.strip("/").split("/")
        allowed = False
        for literals, params, route in self._by_len.get(len(segs), ()):
            if all(segs[i] == s for i, s in literals):
                if route.method != method:
                    allowed = True
                    continue
                try:
                    return route, tuple(int(segs[i]) for i in params)
                except ValueError:
                    raise _bad(f"path segments {[segs[i] for i in params]} must be integers") from None
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}")
        raise _not_found(f"path {path}")


class _DropFilter(logging.Filter):
    """A dropped connection is deliberate; keep uvicorn from reporting it as an app error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _DROP_MESSAGE


class Emulator:
    """The ASGI app. Its state is per process: with several uvicorn workers each has its own faults,
    clock, request log, command runs, setvalue points and session request counts; a session opened
    by one worker is accepted by all (its token is an HMAC under a secret they share)."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.dataset = data.as_dataset(config)
        self.base_path = "/" + config.base_path.strip("/") if config.base_path.strip("/") else ""
        self.fixed_now: int | None = config.now_ms
        self.users = self._users(config.users)
        # Session ids carry the user and the sign-in time, and issToken is their HMAC: any worker
        # process sharing the secret accepts a session another one opened.
        self.secret = os.environ.get(SECRET_ENV, "").encode() or secrets.token_bytes(32)
        self.sessions: dict[str, Session] = {}
        self.plan = FaultPlan(config.faults)
        self.log: deque[dict] = deque(maxlen=REQUEST_LOG_MAX)
        self.log_file = open(config.request_log, "ab") if config.request_log else None  # noqa: SIM115
        self.runs: list[dict] = []
        self.overlay: dict[int, dict[int, float]] = {}  # param -> {ts: value} from setvalue
        self.overlay_version: dict[int, int] = {}  # part of the cache key of the param's series
        self.cache: OrderedDict[tuple, bytes] = OrderedDict()
        self.cache_bytes = 0
        self.seen: OrderedDict[tuple, None] = OrderedDict()  # keys asked for once: cached on the 2nd ask
        self.router = Router(self._routes())
        uvicorn_log = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, _DropFilter) for f in uvicorn_log.filters):
            uvicorn_log.addFilter(_DropFilter())

    def close(self) -> None:
        if self.log_file:
            self.log_file.close()
            self.log_file = None

    def _users(self, users: list[dict] | None) -> dict[str, User]:
        if users is None:
            odd = [i for i in self.dataset.object_ids if i % 2]
            users = [{"login": "demo", "password": "demo", "objects": "all"},
                     {"login": "restricted", "password": "restricted", "objects": odd, "control": False}]
        out: dict[str, User] = {}
        for i, u in enumerate(users):
            objects = u.get("objects", "all")
            out[str(u["login"])] = User(i, str(u["login"]), str(u["password"]),
                                        None if objects == "all" else frozenset(int(o) for o in objects),
                                        bool(u.get("control", True)))
        return out

    def now(self) -> int:
        return self.fixed_now if self.fixed_now is not None else time.time_ns() // 1_000_000

    # -- ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path.startswith(self.base_path + "/"):
            await self._api(scope, receive, send, path[len(self.base_path):])
        elif path.startswith("/_emulator/"):
            answer = await self._control(scope, receive, path[len("/_emulator/"):])
            await _send(send, answer)
        else:
            await _send(send, Answer(_not_found(f"path {path}").body(), 404))

    async def _api(self, scope: dict, receive: Callable, send: Callable, path: str) -> None:
        method = scope["method"]
        query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        entry: dict[str, Any] = {"ts": time.time_ns() // 1_000_000, "method": method, "path": scope["path"],
                                 "query": {k: v[0] if len(v) == 1 else v for k, v in query.items()
                                           if k != "password"}}
        decision = None
        try:
            route, args = self.router.match(method, path)
            if route.series:
                entry["param_id"], entry["interval_ms"] = args[0], args[2] - args[1]
            elif "{param_id}" in route.template:
                entry["param_id"] = args[0]
            decision = self.plan.decide(sign_in=route.sign_in, series=route.series is not None)
            if decision and decision.delay:
                await asyncio.sleep(decision.delay)
            answer = self._fault_answer(decision) if decision else None
            if answer is None:
                if route.sign_in:  # credentials as query parameters or a form-encoded body (not logged)
                    query = {**query, **await _form(scope, receive)}
                request = Request(method, path, query, args, decision=decision)
                if not route.sign_in:
                    request.user = self._authenticate(scope)
                result = route.handler(request)
                answer = result if isinstance(result, Answer) else Answer(result)
        except ApiError as exc:
            answer = exc.answer or Answer(exc.body(), exc.status)
        entry["status"] = answer.status
        if decision:
            fault = ("drop" if decision.drop else f"error_{decision.error}" if decision.error
                     else "rate_limit" if decision.rate_limited else None)
            if answer.status == 200 and not decision.drop:
                if decision.truncate:
                    answer.body = answer.body[: len(answer.body) // 2]
                    fault = "truncate"
                elif decision.hostile:
                    fault = f"hostile_{decision.hostile}"
            if fault:
                entry["fault"] = fault
        self._record(entry)
        if decision and decision.drop:
            await _send_partial(send, answer)
        else:
            await _send(send, answer)

    def _fault_answer(self, d: Decision) -> Answer | None:
        if d.error:
            if d.error_html:
                return Answer(error_page(d.error), d.error, b"text/html; charset=utf-8")
            return Answer(ApiError(d.error, "server_error", "injected server error").body(), d.error)
        if d.rate_limited:
            body = ApiError(429, "too_many_requests", "rate limit exceeded").body()
            return Answer(body, 429, headers=[(b"retry-after", retry_after_header(self.plan.faults.retry_after))])
        return None

    def _record(self, entry: dict) -> None:
        self.log.append(entry)
        if self.log_file:
            self.log_file.write(orjson.dumps(entry) + b"\n")
            self.log_file.flush()

    def _authenticate(self, scope: dict) -> User:
        cookies = {}
        for name, value in scope["headers"]:
            if name == b"cookie":
                for part in value.decode("latin-1").split(";"):
                    k, _, v = part.strip().partition("=")
                    cookies[k] = v
        sid = cookies.get("SEMSESSIONID", "")
        session = self.sessions.get(sid) or self._known_session(sid, cookies.get("issToken", ""))
        if session is None or session.spent:
            raise self._signed_out("sign in first: the SEMSESSIONID and issToken cookies are missing, "
                                   "unknown or expired")
        if not hmac.compare_digest(session.token.encode(), cookies.get("issToken", "").encode()):
            raise self._signed_out("the issToken cookie does not belong to this session")
        f = self.plan.faults
        if f.session_max_age is not None and time.time() - session.created > f.session_max_age:
            session.spent = True
            raise self._signed_out("session expired")
        session.served += 1
        if f.session_max_requests is not None and session.served >= f.session_max_requests:
            session.spent = True  # this request is served; the next one is refused
        return session.user

    def _signed_out(self, message: str) -> ApiError:
        """A request without a live session, answered the way `faults.session_end` says."""
        end = self.plan.faults.session_end
        if end == "403":
            return ApiError(403, "forbidden", message)
        if end.startswith("302"):
            location = f"{self.base_path}/login" if end == "302-login" else "/"
            return ApiError(302, "found", message, Answer(b"", 302, b"text/html", [(b"location", location.encode())]))
        if end == "html-login":
            return ApiError(200, "login_page", message, Answer(LOGIN_PAGE, 200, b"text/html; charset=utf-8"))
        return ApiError(401, "unauthorized", message)

    # -- routes ----------------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        r = Route
        routes = [
            r("POST", "auth/login", self.sign_in, sign_in=True),
            r("GET", "db/object/shortest", lambda q: orjson.dumps([data.object_short(o) for o in self._objects(q)])),
            r("GET", "db/object", self.objects),
            r("GET", "db/object/{object_id}", lambda q: orjson.dumps(data.object_by_id(self.dataset, self._object(q)))),
            r("GET", "db/object/{object_id}/unit", lambda q: orjson.dumps(data.units(self._object(q)))),
            r("GET", "db/object/{object_id}/cdp", lambda q: self.object_params(q, physical=True)),
            r("GET", "db/object/{object_id}/ccp", lambda q: self.object_params(q, physical=False)),
            r("GET", "db/object/{object_id}/params", self.all_object_params),
            r("GET", "db/contrdeviceparam", lambda q: self.param_list(q, physical=True, short=False)),
            r("GET", "db/contrdeviceparam/shortest", lambda q: self.param_list(q, physical=True, short=True)),
            r("GET", "db/contrcalcparam", lambda q: self.param_list(q, physical=False, short=False)),
            r("GET", "db/contrcalcparam/shortest", lambda q: self.param_list(q, physical=False, short=True)),
            r("GET", "search/params", self.search_params),
            r("GET", "db/contrdeviceparam/{param_id}/state", self.param_state),
            r("POST", "db/contrdeviceparam/{param_id}/setvalue", self.set_value),
            r("GET", "extcommand", self.ext_commands),
            r("POST", "db/unit/{device_id}/command", self.run_command),
            r("POST", "db/zone", lambda q: orjson.dumps(data.ZONES)),
            r("POST", "deviceclassifier", lambda q: orjson.dumps(data.CLASSIFIERS)),
            r("POST", "sensor_location", lambda q: orjson.dumps(data.ROOM_TYPES)),
            r("POST", "room", self.rooms),
        ]
        templates = [("db/measure/{id}/{s}/{e}", "physical", "raw"), ("db/calcvalue/{id}/{s}/{e}", "calculated", "raw"),
                     ("db/signal/{id}/{s}/{e}", "signal", "raw")]
        for kind in ("average", "candles"):
            templates += [(f"db/measure/{kind}/{{id}}/{{s}}/{{e}}", "physical", kind),
                          (f"db/measure/{{id}}/{kind}/{{s}}/{{e}}", "physical", kind),
                          (f"db/calcvalue/{kind}/{{id}}/{{s}}/{{e}}", "calculated", kind)]
        for template, source, kind in templates:
            routes.append(r("GET", template, functools.partial(self._series, source=source, kind=kind),
                            series=(source, kind)))
        return routes

    def _token(self, sid: str) -> str:
        return hmac.new(self.secret, sid.encode(), hashlib.sha256).hexdigest()

    def _known_session(self, sid: str, token: str) -> Session | None:
        """A session opened by another worker process: trusted when its token is the id's HMAC."""
        if len(sid) != 44 or not hmac.compare_digest(self._token(sid).encode(), token.encode()):
            return None
        index, created_ms = int(sid[24:32], 16), int(sid[32:], 16)
        user = next((u for u in self.users.values() if u.index == index), None)
        if user is None:
            return None
        self.sessions[sid] = session = Session(user, self._token(sid), created_ms / 1000)
        return session

    def sign_in(self, q: Request) -> Answer:
        user = self.users.get(q.one("username") or "")
        password = q.one("password") or ""
        if user is None or not hmac.compare_digest(user.password.encode(), password.encode()):
            raise ApiError(401, "bad_credentials", "wrong login or password")
        created = time.time()
        sid = f"{secrets.token_hex(12)}{user.index:08x}{int(created * 1000):012x}"
        token = self._token(sid)
        self.sessions[sid] = Session(user, token, created)
        base = self.base_path or "/"
        cookies = [
            f"SEMSESSIONID={sid}; Path=/; HttpOnly; SameSite=lax",
            f"rememberMe=deleteMe; Path={base}; Max-Age=0; SameSite=lax",
            f"language={data.USER_LOCALE}; Path={base}",
            f"issToken={token}; Path=/",
        ]
        headers = [(b"set-cookie", c.encode()) for c in cookies]
        headers.append((b"access-control-allow-credentials", b"true"))
        return Answer(orjson.dumps(data.user_record(user.index, user.login, user.control)), headers=headers)

    def _objects(self, q: Request) -> list[int]:
        return [o for o in self.dataset.object_ids if q.user.sees(o)]

    def _object(self, q: Request) -> int:
        object_id = q.args[0]
        if object_id not in self.dataset.object_ids or not q.user.sees(object_id):
            raise _not_found(f"object {object_id}")
        return object_id

    def _param(self, q: Request, param_id: int) -> Param:
        p = self.dataset.param(param_id)
        if p is None or not q.user.sees(p.object_id):
            raise _not_found(f"parameter {param_id}")
        return p

    def objects(self, q: Request) -> bytes:
        states = set(q.integers("state"))
        return orjson.dumps([data.object_full(self.dataset, o) for o in self._objects(q)
                             if not states or data.object_state(o) in states])

    def _records(self, object_ids: list[int], *, physical: bool, calculated: bool) -> list[dict]:
        ds = self.dataset
        ids = [pid for o in object_ids for pid in (ds.physical_ids(o) if physical else [])
               + (ds.calc_ids(o) if calculated else [])]
        return [data.param_record(ds, pid) for pid in sorted(ids)]

    def object_params(self, q: Request, *, physical: bool) -> bytes:
        records = self._records([self._object(q)], physical=physical, calculated=not physical)
        tags = set(q.strings("tag"))
        for name in ("ctrability", "locked"):
            wanted = q.flag(name)
            if wanted is not None:
                records = [r for r in records if r.get(name, False) == wanted]
        if tags:
            records = [r for r in records if tags & set(r["tags"])]
        return orjson.dumps(records)

    def all_object_params(self, q: Request) -> bytes:
        return orjson.dumps(self._records([self._object(q)], physical=True, calculated=bool(q.flag("calc"))))

    def param_list(self, q: Request, *, physical: bool, short: bool) -> bytes:
        object_id = q.integer("objectId")
        objects = [o for o in self._objects(q) if object_id is None or o == object_id]
        records = self._records(objects, physical=physical, calculated=not physical)
        filters = {"controllerId": q.integers("controllerId") + q.integers("droneID"),
                   "deviceClassifierId": q.integers("deviceClassified"), "roomId": q.integers("roomID")}
        for key, wanted in filters.items():
            if wanted:
                records = [r for r in records if r.get(key) in wanted]
        tags = set(q.strings("tags"))
        if tags:
            records = [r for r in records if tags & set(r["tags"])]
        return orjson.dumps([data.param_short(r) for r in records] if short else records)

    def search_params(self, q: Request) -> bytes:
        limit, offset = q.integer("limit", 100), q.integer("offset", 0)
        if limit < 0 or offset < 0:
            raise _bad("limit and offset must not be negative")
        oids = set(q.integers("oid"))
        objects = [o for o in self._objects(q) if not oids or o in oids]
        return orjson.dumps(self._records(objects, physical=True, calculated=True)[offset:offset + limit])

    # -- series ----------------------------------------------------------------------------------

    def _raw(self, p: Param, lo: int, hi: int, now: int) -> tuple[np.ndarray, np.ndarray]:
        """Generated points in [lo, hi] (none after now) merged with the setvalue points."""
        ts, values = data.raw_series(self.dataset, p.id, lo, hi, now)
        extra = self.overlay.get(p.id)
        if extra:
            cap = min(hi, now)
            added = sorted((t, v) for t, v in extra.items() if lo <= t <= cap)
            if added:
                ats = np.array([t for t, _ in added], np.int64)
                keep = ~np.isin(ts, ats)
                ts = np.concatenate([ts[keep], ats])
                values = np.concatenate([values[keep], np.array([v for _, v in added], np.float64)])
                order = np.argsort(ts, kind="stable")
                ts, values = ts[order], values[order]
        return ts, values

    def _series(self, q: Request, *, source: str, kind: str) -> Answer:
        param_id, start, end = q.args
        p = self._param(q, param_id)
        if (source == "calculated") != (p.kind == "calculated"):
            raise _not_found(f"{source} parameter {param_id}")
        if source == "signal" and p.kind != "signal":
            raise _bad(f"parameter {param_id} is not a signal parameter")
        if start > end:
            raise _bad(f"the interval start {start} is after its end {end}")
        if kind == "raw" and end - start > DAY_MS:
            raise _bad(f"raw intervals may span at most 24 hours, this one spans {(end - start) / 3.6e6:.2f} h")
        count = None if source == "signal" else q.integer("count", COUNT_DEFAULT)
        if count is not None:
            if count < 1:
                raise _bad("count must be at least 1")
            count = min(count, COUNT_MAX)
        if (cap := self.plan.faults.max_count) is not None:  # the silent cap: the first `cap`, whatever was asked
            count = cap if count is None else min(count, cap)
        now = self.now()
        lo, hi = (start, end) if kind == "raw" else data.bucket_span(start, end)
        hostile = q.decision.hostile if q.decision else None
        # Answers whose points all lie before the clock never change (setvalue bumps the key).
        key = (source, kind, param_id, start, end, count, self.overlay_version.get(param_id, 0))
        if hi <= now and not hostile and (body := self.cache.get(key)) is not None:
            self.cache.move_to_end(key)
            return Answer(body)
        if kind == "raw":
            ts, values = self._raw(p, lo, hi, now)
            columns = {"ts": ts[:count], "value": values[:count]}
        elif kind == "average":
            b, mean = self._buckets(p, data.average_of, lo, hi, now, count)
            columns = {"ts": b, "value": mean}
        else:
            b, o, h, low, c = self._buckets(p, data.candles_of, lo, hi, now, count)
            columns = {"ts": b, "open": o, "close": c, "low": low, "high": h}
        if hostile:
            body, content_type = hostile_body(hostile, q.decision.salt, param_id, columns, kind == "candles",
                                              start, end)
            return Answer(body, content_type=content_type)
        if kind == "candles":
            body = encode_candles(param_id, columns["ts"], columns["open"], columns["high"], columns["low"],
                                  columns["close"])
        else:
            body = encode_points(param_id, columns["ts"], columns["value"])
        if hi <= now and len(body) <= CACHE_MAX_ENTRY:
            self._cache_put(key, body)
        return Answer(body)

    def _buckets(self, p: Param, aggregate: Callable, lo: int, hi: int, now: int, count: int) -> list[np.ndarray]:
        """The first `count` buckets of [lo, hi], computed a slab at a time: aggregate windows have no
        length limit, so memory stays bounded and the work stops once `count` buckets are found."""
        slab = max(1, p.period_ms * 200_000 // data.BUCKET_MS) * data.BUCKET_MS
        parts = [aggregate(*self._raw(p, lo, lo - 1, now))]  # typed empty columns
        found = 0
        for first in range(lo, min(hi, now) + 1, slab):
            parts.append(aggregate(*self._raw(p, first, min(first + slab - 1, hi), now)))
            found += len(parts[-1][0])
            if found >= count:
                break
        return [np.concatenate(column)[:count] for column in zip(*parts, strict=True)]

    def _cache_put(self, key: tuple, body: bytes) -> None:
        # One-off windows (a pipeline reads each once) would only churn memory: cache repeats.
        if key not in self.seen:
            self.seen[key] = None
            if len(self.seen) > SEEN_MAX:
                self.seen.popitem(last=False)
            return
        self.cache[key] = body
        self.cache_bytes += len(body)
        while self.cache_bytes > CACHE_MAX_BYTES:
            self.cache_bytes -= len(self.cache.popitem(last=False)[1])

    def param_state(self, q: Request) -> bytes:
        p = self._param(q, q.args[0])
        if not p.physical:
            raise _not_found(f"physical parameter {p.id}")
        now = self.now()
        at = min(q.integer("time", now), now)
        ts, values = self._raw(p, at - data.status_lookback_ms(p), at, now)
        return orjson.dumps(data.status_of(p, float(values[-1]) if len(values) else None))

    def set_value(self, q: Request) -> bytes:
        p = self._param(q, q.args[0])
        if not p.physical:
            raise _not_found(f"physical parameter {p.id}")
        q.user.require_control()
        raw = q.one("value")
        try:
            value = float(raw or "")
        except ValueError:
            raise _bad(f"value must be a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise _bad("value must be finite")
        if p.kind == "signal" and value not in (0.0, 1.0):
            raise _bad(f"parameter {p.id} is a signal parameter: value must be 0 or 1")
        now = self.now()
        self.overlay.setdefault(p.id, {})[now] = value
        self.overlay_version[p.id] = self.overlay_version.get(p.id, 0) + 1
        return orjson.dumps({"id": p.id, "value": value, "timestmp": iso_strings(np.array([now]))[0]})

    # -- commands and lookups --------------------------------------------------------------------

    def _device(self, q: Request, device_id: int) -> int:
        object_id, d = divmod(device_id, 100)
        if object_id not in self.dataset.object_ids or not 1 <= d <= data.DEVICES_PER_OBJECT \
                or not q.user.sees(object_id):
            raise _not_found(f"device {device_id}")
        return device_id

    def ext_commands(self, q: Request) -> bytes:
        device_id = q.integer("deviceId")
        if device_id is None:
            raise _bad("deviceId is required")
        return orjson.dumps(data.ext_commands(self._device(q, device_id)))

    def run_command(self, q: Request) -> bytes:
        device_id = self._device(q, q.args[0])
        q.user.require_control()
        command_id = q.integer("extCommandId")
        if command_id is None or q.one("commandData") is None:
            raise _bad("extCommandId and commandData are required")
        if command_id not in {c["id"] for c in data.ext_commands(device_id)}:
            raise _not_found(f"command {command_id} of device {device_id}")
        run = {"id": len(self.runs) + 1, "deviceId": device_id, "extCommandId": command_id,
               "commandData": q.one("commandData"), "login": q.user.login, "ts": self.now()}
        self.runs.append(run)
        return orjson.dumps({"id": run["id"], "status": "accepted"})

    def rooms(self, q: Request) -> bytes:
        object_id, location = q.integer("objectId"), q.integer("sensorLocationId")
        return orjson.dumps([room for o in self._objects(q) if object_id is None or o == object_id
                             for room in data.rooms(o) if location is None or room["sensorLocationId"] == location])

    # -- control API -----------------------------------------------------------------------------

    async def _control(self, scope: dict, receive: Callable, what: str) -> Answer:
        method = scope["method"]
        try:
            if method == "PUT":
                body = b""
                while True:
                    message = await receive()
                    body += message.get("body", b"")
                    if not message.get("more_body"):
                        break
                try:
                    doc = orjson.loads(body or b"{}")
                except orjson.JSONDecodeError:
                    raise _bad("the body must be JSON") from None
                if not isinstance(doc, dict):
                    raise _bad("the body must be a JSON object")
            handler = {
                ("GET", "health"): lambda: {"status": "ok", "pid": os.getpid(), "base_path": self.base_path,
                                            "now": self.now()},
                ("GET", "requests"): lambda: list(self.log),
                ("DELETE", "requests"): self._clear_log,
                ("GET", "faults"): lambda: self.plan.faults.as_dict(),
                ("PUT", "faults"): lambda: self._set_faults(doc),
                ("GET", "clock"): lambda: {"now": self.fixed_now, "current": self.now()},
                ("PUT", "clock"): lambda: self._set_clock(doc),
                ("GET", "commands"): lambda: self.runs,
            }.get((method, what.strip("/")))
            if handler is None:
                raise _not_found(f"control path /_emulator/{what} ({method})")
            return Answer(orjson.dumps(handler()))
        except ApiError as exc:
            return Answer(exc.body(), exc.status)

    def _clear_log(self) -> dict:
        cleared = len(self.log)
        self.log.clear()
        return {"cleared": cleared}

    def _set_faults(self, doc: dict) -> dict:
        try:
            return self.plan.update(doc).as_dict()
        except (ValueError, TypeError) as exc:
            raise _bad(str(exc)) from None

    def _set_clock(self, doc: dict) -> dict:
        now = doc.get("now")
        if now is not None and (isinstance(now, bool) or not isinstance(now, int)):
            raise _bad("now must be epoch milliseconds (integer) or null")
        self.fixed_now = now
        return {"now": self.fixed_now, "current": self.now()}


async def _form(scope: dict, receive: Callable) -> dict[str, list[str]]:
    """The fields of a form-encoded request body (none for other bodies)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    content_type = dict(scope["headers"]).get(b"content-type", b"")
    if not content_type.startswith(b"application/x-www-form-urlencoded"):
        return {}
    return parse_qs(body.decode("latin-1"), keep_blank_values=True)


async def _send(send: Callable, answer: Answer) -> None:
    headers = [(b"content-type", answer.content_type), (b"content-length", b"%d" % len(answer.body)),
               *answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def _send_partial(send: Callable, answer: Answer) -> None:
    """Announce the whole body, send half of it, and return: uvicorn then closes the connection."""
    body = answer.body if len(answer.body) >= 2 else answer.body + b" " * 64
    headers = [(b"content-type", answer.content_type), (b"content-length", b"%d" % len(body)), *answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})


def create_app(config: EmulatorConfig) -> Emulator:
    """The ASGI app for one emulator configuration."""
    return Emulator(config)


def app_from_env() -> Emulator:
    """Factory for uvicorn workers: the configuration comes as JSON in $ETL_EMULATOR_CONFIG."""
    from etl.emulator.server import EmulatorConfig

    return create_app(EmulatorConfig.from_json(os.environ[CONFIG_ENV]))


__all__ = ["Dataset", "Emulator", "create_app", "app_from_env", "encode_points", "iso_strings"]
