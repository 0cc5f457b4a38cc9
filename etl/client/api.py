"""One method per endpoint of the document, typed where the document shows the shape."""

from __future__ import annotations

import abc
import asyncio
import functools
import itertools
import logging
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx
from pydantic import ValidationError

from etl.client.auth import SignIn
from etl.client.count_cap import AnswerCaps
from etl.client.models import (
    Candles,
    ExternalCommand,
    ObjectFull,
    ObjectShort,
    Parameter,
    ParamList,
    ParamStatus,
    Points,
    Record,
    SearchPage,
    User,
    one_line,
    record_id,
    short_repr,
)
from etl.client.options import DEFAULT, ClientOptions
from etl.client.retry import ClientStats, RetryPolicy
from etl.client.series import SMALL_ANSWER, JsonArray, decode_candles, decode_points
from etl.client.session import Query, Session
from etl.errors import InvalidArgument, InvalidResponse, NotFound, ParameterGone, Throttled
from etl.model import ParamKind, Series
from etl.timeutil import DAY_MS, Time, now_ms, to_ms

log = logging.getLogger(__name__)
RAW_WINDOW_MAX_MS = DAY_MS
M = TypeVar("M", bound=Record)
# The route of each series of each kind of parameter. A signal parameter is a physical one: the
# document gives it a raw route of its own only.
ROUTES = {
    (ParamKind.PHYSICAL, Series.RAW): "/db/measure",
    (ParamKind.PHYSICAL, Series.AVERAGE): "/db/measure/average",
    (ParamKind.PHYSICAL, Series.CANDLES): "/db/measure/candles",
    (ParamKind.CALCULATED, Series.RAW): "/db/calcvalue",
    (ParamKind.CALCULATED, Series.AVERAGE): "/db/calcvalue/average",
    (ParamKind.CALCULATED, Series.CANDLES): "/db/calcvalue/candles",
    (ParamKind.SIGNAL, Series.RAW): "/db/signal",
    (ParamKind.SIGNAL, Series.AVERAGE): "/db/measure/average",
    (ParamKind.SIGNAL, Series.CANDLES): "/db/measure/candles",
}


def _series_path(kind: ParamKind, series: Series, param_id: int, start: Time, end: Time) -> str:
    """The path of one series request, its window checked: GET {route}/{param_id}/{start}/{end}."""
    s, e = _window(start, end, raw=series is Series.RAW)
    return f"{ROUTES[kind, series]}/{int(param_id)}/{s}/{e}"


def _window(start: Time, end: Time, *, raw: bool) -> tuple[int, int]:
    start_ms, end_ms = to_ms(start), to_ms(end)
    if start_ms > end_ms:
        raise InvalidArgument(f"window start {start_ms} is after its end {end_ms}")
    if raw and end_ms - start_ms > RAW_WINDOW_MAX_MS:
        raise InvalidArgument(
            f"raw windows may span at most 24 hours; this one spans {(end_ms - start_ms) / 3_600_000:.1f} h"
        )
    return start_ms, end_ms


def _listing(doc: Any, what: str) -> list[Any]:
    if not isinstance(doc, list):
        raise InvalidResponse(f"{what}: expected a JSON array, got {type(doc).__name__}")
    return doc


# Where the records of a paged answer are, and its total, in the envelopes servers are seen to use (a bare
# array, {"total": N, "items": [...]}, Spring's Page {"content": [...], "totalElements": N, ...}, ...).
PAGE_KEYS = ("items", "content", "data", "results", "rows")
TOTAL_KEYS = ("total", "totalElements", "totalCount", "totalItems", "count")


def _page(doc: Any, what: str) -> SearchPage:
    """A page of a paged listing, as a bare array or in one of the envelopes of PAGE_KEYS."""
    if isinstance(doc, list):
        return SearchPage(doc)
    if isinstance(doc, dict):
        held = [key for key in PAGE_KEYS if isinstance(doc.get(key), list)]
        if len(held) == 1:
            totals = [v for k in TOTAL_KEYS if isinstance(v := doc.get(k), int) and not isinstance(v, bool)]
            return SearchPage(doc[held[0]], totals[0] if totals and totals[0] >= 0 else None, held[0])
        keys = ", ".join(short_repr(k, 20) for k in list(doc)[:6]) + (", ..." if len(doc) > 6 else "")
        saw = (
            f"an object with arrays under {', '.join(held)}"
            if held
            else f"an object of keys {keys or '(none)'}"
        )
    else:
        saw = type(doc).__name__
    raise InvalidResponse(
        f"{what}: expected a JSON array, or an object holding one under {', '.join(PAGE_KEYS)}; got {saw}"
    )


def _model(cls: type[M], doc: Any, what: str) -> M:
    """One record as its model, or an InvalidResponse on one line."""
    try:
        return cls.model_validate(doc)
    except ValidationError as exc:
        raise InvalidResponse(f"{what}: {one_line(exc)}") from None


# The ids a filter takes: one, several, or none (the filter is not sent).
Ids = Iterable[int] | int | None


def _ids(values: Ids) -> list[int] | None:
    if values is None:
        return None
    return [int(values)] if isinstance(values, int) else [int(v) for v in values]


def _query(**params: Query) -> dict[str, Query]:
    """Drop unset filters; booleans as the platform spells them."""
    out: dict[str, Query] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


class _Client(abc.ABC):
    """The constructor both clients share: its keywords (or `options`, never both) made into one
    `ClientOptions`, and `_open` given the session they make."""

    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        sign_in: SignIn = DEFAULT.sign_in,
        timeout: httpx.Timeout | float = DEFAULT.timeout,
        request_timeout: float | None = DEFAULT.request_timeout,
        max_answer_bytes: int = DEFAULT.max_answer_bytes,
        retry: RetryPolicy | None = None,
        max_in_flight: int = DEFAULT.max_in_flight,
        verify: bool | ssl.SSLContext = DEFAULT.verify,
        transport: httpx.AsyncBaseTransport | None = None,
        stats: ClientStats | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        """`base_url`: host and base path (`https://HOST/sem-restservices`). `max_in_flight` bounds the
        requests in flight; `retry` is the policy after a failure; `verify` the TLS trust (a context for a
        private CA); `transport` replaces the network (tests, recorded answers). `timeout` bounds each
        connect and read, `request_timeout` a whole exchange (seconds; None: no bound); an answer over
        `max_answer_bytes` (on the wire or decompressed) is refused (`AnswerTooLarge`). `options`: all of
        these settings as one value (`ClientOptions.from_config` makes it from a config), instead of
        the keywords."""
        keywords = ClientOptions(
            sign_in=sign_in,
            timeout=timeout,
            request_timeout=request_timeout,
            max_answer_bytes=max_answer_bytes,
            retry=retry or DEFAULT.retry,
            max_in_flight=max_in_flight,
            verify=verify,
        )
        if options is not None and keywords != DEFAULT:
            raise TypeError("give the client's settings as options or as keywords, not both")
        chosen = keywords if options is None else options
        self._open(lambda: Session(base_url, username, password, chosen, transport=transport, stats=stats))

    @abc.abstractmethod
    def _open(self, session: Callable[[], Session]) -> None:
        """Made ready to talk to the server through the session `session()` makes."""


class MonitoringClient(_Client):
    """Async client of the monitoring platform. Use as `async with MonitoringClient(...) as c:`.

    `sign_in`: how the credentials go to /auth/login, as the document's query parameters ("query") or
    as a form-encoded body ("form", as public scripts for the platform do). `caps` holds what the
    series answers tell about the server's silent cap on points per answer (see `etl.client.count_cap`);
    `throttled`, the parameters whose series the server throttled to the end of a request's retries
    (`Throttled`), until when it asked to wait: `series` does not ask them again before then.
    A record of a listing that cannot be used (an id that is not a 64-bit integer, a field of the wrong
    type, nesting deeper than the parser reads) is left out of what the methods return and noted in
    `skipped`, one line each."""

    def _open(self, session: Callable[[], Session]) -> None:
        self.session = session()
        self.caps = AnswerCaps()
        self.throttled: dict[int, float] = {}  # param_id -> time.monotonic() the server's wait ends
        self.skipped: list[str] = []

    @property
    def stats(self) -> ClientStats:
        return self.session.stats

    def skip(self, what: str, reason: str) -> None:
        """A record the platform sent that cannot be used: left out, and noted in `skipped`."""
        self.skipped.append(f"{what}: {reason}")
        log.warning("left out %s: %s", what, reason)

    def _valid(self, cls: type[M], records: Any, what: str) -> list[M]:
        found = []
        for index, record in enumerate(_listing(records, what)):
            try:
                found.append(cls.model_validate(record))
            except ValidationError as exc:
                self.skip(f"record #{index + 1} of {what}", one_line(exc))
        return found

    async def __aenter__(self) -> MonitoringClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.session.aclose()

    async def _get(self, path: str, **params: Query) -> Any:
        return await self.session.call("GET", path, _query(**params))

    async def _post(self, path: str, *, expect_json: bool = True, **params: Query) -> Any:
        return await self.session.call("POST", path, _query(**params), expect_json=expect_json)

    def server_now(self) -> int:
        """The server's time now (epoch ms), as the Date header of its last sign-in answer tells it; our
        own clock when it sent none (or before the first sign-in)."""
        return now_ms() + (self.session.auth.clock_offset or 0)

    # 4.1 sign-in ------------------------------------------------------------------------------
    async def sign_in(self) -> User | None:
        """Sign in now. Not needed: the first request signs in, and a session that ends is replaced."""
        return await self.session.sign_in()

    # 4.2 objects ------------------------------------------------------------------------------
    async def objects_short(self) -> list[ObjectShort]:
        return self._valid(ObjectShort, await self._get("/db/object/shortest"), "GET /db/object/shortest")

    async def objects(self, states: Ids = None) -> list[ObjectFull]:
        return [o async for page in self.object_pages(states) for o in page]

    async def object_pages(self, states: Ids = None, size: int = 250) -> AsyncIterator[list[ObjectFull]]:
        """The full listing (one answer) as models a page at a time, each record decoded when its page
        is: a wide instance's records are never all Python objects at once."""
        what = "GET /db/object"
        listing = await self.session.call("GET", "/db/object", _query(state=_ids(states)), decode=JsonArray)
        for index, reason in listing.unreadable:
            self.skip(f"record #{index + 1} of {what}", reason)
        records = listing.items()
        while chunk := list(itertools.islice(records, size)):
            page = []
            for index, record in chunk:
                try:
                    page.append(ObjectFull.model_validate(record))
                except ValidationError as exc:
                    self.skip(f"record #{index + 1} of {what}", one_line(exc))
            if page:
                yield page

    async def object(self, object_id: int) -> ObjectFull:
        path = f"/db/object/{int(object_id)}"
        return _model(ObjectFull, await self._get(path), f"GET {path}")

    async def units(self, object_id: int) -> list[dict[str, Any]]:
        path = f"/db/object/{int(object_id)}/unit"
        return _listing(await self._get(path), f"GET {path}")

    # 4.3 parameters ---------------------------------------------------------------------------
    def _params(self, records: Any, source: ParamList, object_id: int | None, what: str) -> list[Parameter]:
        found = []
        for index, r in enumerate(_listing(records, what)):
            try:
                if not isinstance(r, dict):
                    raise ValueError(f"not a record: {type(r).__name__}")
                owner = object_id or (None if r.get("objectId") is None else record_id(r["objectId"]))
                found.append(Parameter(id=record_id(r.get("id")), source=source, object_id=owner, meta=r))
            except ValueError as exc:
                self.skip(f"record #{index + 1} of {what}", str(exc))
        return found

    def _param_filters(
        self,
        object_id: int | None,
        controller_ids: Ids,
        drone_id: int | None,
        tags: Iterable[str] | None,
        device_classified: Ids,
        room_ids: Ids,
    ) -> dict[str, Query]:
        return dict(
            objectId=object_id,
            controllerId=_ids(controller_ids),
            droneID=drone_id,
            tags=list(tags) if tags else None,
            deviceClassified=_ids(device_classified),
            roomID=_ids(room_ids),
        )

    async def physical_params(
        self,
        object_id: int | None = None,
        *,
        controller_ids: Ids = None,
        drone_id: int | None = None,
        tags: Iterable[str] | None = None,
        device_classified: Ids = None,
        room_ids: Ids = None,
        short: bool = False,
    ) -> list[Parameter]:
        path = "/db/contrdeviceparam/shortest" if short else "/db/contrdeviceparam"
        filters = self._param_filters(object_id, controller_ids, drone_id, tags, device_classified, room_ids)
        return self._params(await self._get(path, **filters), "physical", object_id, f"GET {path}")

    async def calculated_params(
        self,
        object_id: int | None = None,
        *,
        controller_ids: Ids = None,
        drone_id: int | None = None,
        tags: Iterable[str] | None = None,
        device_classified: Ids = None,
        room_ids: Ids = None,
        short: bool = False,
    ) -> list[Parameter]:
        path = "/db/contrcalcparam/shortest" if short else "/db/contrcalcparam"
        filters = self._param_filters(object_id, controller_ids, drone_id, tags, device_classified, room_ids)
        return self._params(await self._get(path, **filters), "calculated", object_id, f"GET {path}")

    async def object_physical_params(
        self,
        object_id: int,
        *,
        ctrability: bool | None = None,
        locked: bool | None = None,
        tags: Iterable[str] | None = None,
    ) -> list[Parameter]:
        path = f"/db/object/{int(object_id)}/cdp"
        records = await self._get(path, ctrability=ctrability, locked=locked, tag=list(tags or []) or None)
        return self._params(records, "physical", object_id, f"GET {path}")

    async def object_calculated_params(
        self,
        object_id: int,
        *,
        ctrability: bool | None = None,
        locked: bool | None = None,
        tags: Iterable[str] | None = None,
    ) -> list[Parameter]:
        path = f"/db/object/{int(object_id)}/ccp"
        records = await self._get(path, ctrability=ctrability, locked=locked, tag=list(tags or []) or None)
        return self._params(records, "calculated", object_id, f"GET {path}")

    async def object_params(self, object_id: int, *, calc: bool = False) -> list[dict[str, Any]]:
        path = f"/db/object/{int(object_id)}/params"
        return _listing(await self._get(path, calc=calc), f"GET {path}")

    async def search_page(
        self, object_ids: Iterable[int], *, limit: int = 500, offset: int = 0
    ) -> SearchPage:
        """One page of the parameters of these objects, its records as they came (a bare array or an
        envelope: `SearchPage`). An empty page ends the listing; a short one need not."""
        body = await self._get("/search/params", oid=_ids(object_ids), limit=limit, offset=offset)
        return _page(body, "GET /search/params")

    async def search_params(
        self, object_ids: Iterable[int], *, limit: int = 500, offset: int = 0
    ) -> list[Any]:
        """The records of one page of the search (`search_page`)."""
        return (await self.search_page(object_ids, limit=limit, offset=offset)).records

    # 4.4 measurements -------------------------------------------------------------------------
    async def _measure(self, url: str, series: Series, count: int | None) -> Points | Candles:
        return await (self._candles(url, count) if series is Series.CANDLES else self._points(url, count))

    async def _points(self, url: str, count: int | None) -> Points:
        return await self.session.call(
            "GET", url, _query(count=count), decode=decode_points, in_thread_over=SMALL_ANSWER
        )

    async def _candles(self, url: str, count: int | None) -> Candles:
        return await self.session.call("GET", url, _query(count=count), decode=decode_candles)

    async def measure_raw(self, param_id: int, start: Time, end: Time, count: int | None = None) -> Points:
        """GET /db/measure/{param_id}/{start}/{end}"""
        return await self._points(_series_path(ParamKind.PHYSICAL, Series.RAW, param_id, start, end), count)

    async def measure_average(
        self, param_id: int, start: Time, end: Time, count: int | None = None
    ) -> Points:
        """GET /db/measure/average/{param_id}/{start}/{end}"""
        path = _series_path(ParamKind.PHYSICAL, Series.AVERAGE, param_id, start, end)
        return await self._points(path, count)

    async def measure_candles(
        self, param_id: int, start: Time, end: Time, count: int | None = None
    ) -> Candles:
        """GET /db/measure/candles/{param_id}/{start}/{end}"""
        path = _series_path(ParamKind.PHYSICAL, Series.CANDLES, param_id, start, end)
        return await self._candles(path, count)

    async def calc_raw(self, param_id: int, start: Time, end: Time, count: int | None = None) -> Points:
        """GET /db/calcvalue/{param_id}/{start}/{end}"""
        return await self._points(_series_path(ParamKind.CALCULATED, Series.RAW, param_id, start, end), count)

    async def calc_average(self, param_id: int, start: Time, end: Time, count: int | None = None) -> Points:
        """GET /db/calcvalue/average/{param_id}/{start}/{end}"""
        path = _series_path(ParamKind.CALCULATED, Series.AVERAGE, param_id, start, end)
        return await self._points(path, count)

    async def calc_candles(self, param_id: int, start: Time, end: Time, count: int | None = None) -> Candles:
        """GET /db/calcvalue/candles/{param_id}/{start}/{end}"""
        path = _series_path(ParamKind.CALCULATED, Series.CANDLES, param_id, start, end)
        return await self._candles(path, count)

    async def signal(self, param_id: int, start: Time, end: Time) -> Points:
        """GET /db/signal/{param_id}/{start}/{end} (no count)."""
        return await self._points(_series_path(ParamKind.SIGNAL, Series.RAW, param_id, start, end), None)

    async def measure_average_alt(
        self, param_id: int, start: Time, end: Time, count: int | None = None
    ) -> Points:
        """The document's second spelling, /db/measure/{id}/average/{start}/{end}."""
        s, e = _window(start, end, raw=False)
        return await self._points(f"/db/measure/{int(param_id)}/average/{s}/{e}", count)

    async def measure_candles_alt(
        self, param_id: int, start: Time, end: Time, count: int | None = None
    ) -> Candles:
        s, e = _window(start, end, raw=False)
        return await self._candles(f"/db/measure/{int(param_id)}/candles/{s}/{e}", count)

    async def series(
        self, param_id: int, kind: ParamKind, series: Series, start: Time, end: Time, count: int | None = None
    ) -> Points | Candles:
        """One series of a parameter from the route its kind takes (`/db/signal` takes no count). The
        answer's length is noted in `caps`; a parameter `throttled` is not asked before its wait ends; one
        whose series answered 404 is gone (`stats.gone`) and not asked again."""
        kind, series = ParamKind(kind), Series(series)
        if param_id in self.stats.gone:
            raise ParameterGone(
                f"param {param_id}: gone (HTTP 404 earlier in this run): not asked again", 404
            )
        if kind is ParamKind.SIGNAL and series is Series.RAW:
            count = None
        if (wait := self.throttled.get(param_id, 0.0) - time.monotonic()) > 0:
            # Asking would only wait on the same throttle, past the request's deadline.
            raise Throttled(
                f"param {param_id}: throttled (HTTP 429) for {wait:.0f}s more, as the server asked; "
                "not asked again before then",
                429,
                wait,
            )
        try:
            data = await self._measure(_series_path(kind, series, param_id, start, end), series, count)
        except Throttled as exc:
            if exc.retry_after:
                self.throttled[param_id] = time.monotonic() + exc.retry_after
            raise
        except NotFound as exc:
            self.stats.gone.add(param_id)
            raise ParameterGone(f"param {param_id}: {exc}", exc.status, exc.excerpt) from None
        self.caps.saw(kind, series, len(data))
        return data

    # 4.5 status, 4.6 set value ----------------------------------------------------------------
    async def param_status(self, param_id: int, at: Time | None = None) -> ParamStatus:
        body = await self._get(
            f"/db/contrdeviceparam/{int(param_id)}/state", time=None if at is None else to_ms(at)
        )
        return _model(ParamStatus, body, f"GET /db/contrdeviceparam/{int(param_id)}/state")

    async def set_value(self, param_id: int, value: float) -> Any:
        """Acts on real equipment. The answer's shape is not documented: returned as it came."""
        return await self._post(
            f"/db/contrdeviceparam/{int(param_id)}/setvalue", expect_json=False, value=float(value)
        )

    # 4.7 external commands --------------------------------------------------------------------
    async def ext_commands(self, device_id: int) -> list[ExternalCommand]:
        commands = await self._get("/extcommand", deviceId=int(device_id))
        return self._valid(ExternalCommand, commands, f"GET /extcommand?deviceId={int(device_id)}")

    async def run_command(self, device_id: int, command_id: int, data: str) -> Any:
        """Acts on real equipment. The answer's shape is not documented: returned as it came."""
        return await self._post(
            f"/db/unit/{int(device_id)}/command",
            expect_json=False,
            extCommandId=int(command_id),
            commandData=data,
        )

    # 4.8 reference lookups (POST with an empty body) ------------------------------------------
    async def zones(self) -> list[dict[str, Any]]:
        return _listing(await self._post("/db/zone"), "POST /db/zone")

    async def classifiers(self) -> list[dict[str, Any]]:
        return _listing(await self._post("/deviceclassifier"), "POST /deviceclassifier")

    async def room_types(self) -> list[dict[str, Any]]:
        return _listing(await self._post("/sensor_location"), "POST /sensor_location")

    async def rooms(
        self, object_id: int | None = None, sensor_location_id: int | None = None
    ) -> list[dict[str, Any]]:
        rooms = await self._post("/room", objectId=object_id, sensorLocationId=sensor_location_id)
        return _listing(rooms, "POST /room")


P = ParamSpec("P")
R = TypeVar("R")


def _blocking(
    method: Callable[Concatenate[MonitoringClient, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SyncMonitoringClient, P], R]:
    """`MonitoringClient.method`, run to completion on the facade's own event loop."""

    def blocking(self: SyncMonitoringClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(method(self._client, *args, **kwargs))

    functools.update_wrapper(blocking, method)
    return blocking


class SyncMonitoringClient(_Client):
    """Blocking facade for scripts and notebooks: the same methods as `MonitoringClient`, without
    `await`. Its requests run on an event loop of its own, in a thread, so it also works where a loop is
    already running (Jupyter)."""

    def _open(self, session: Callable[[], Session]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="etl-sync-client", daemon=True)
        self._thread.start()

        async def make() -> MonitoringClient:  # the session's locks belong to the facade's loop
            client = MonitoringClient.__new__(MonitoringClient)
            client._open(session)
            return client

        self._client = self._run(make())

    def _run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    @property
    def stats(self) -> ClientStats:
        return self._client.stats

    @property
    def caps(self) -> AnswerCaps:
        return self._client.caps

    def server_now(self) -> int:
        return self._client.server_now()

    sign_in = _blocking(MonitoringClient.sign_in)
    objects_short = _blocking(MonitoringClient.objects_short)
    objects = _blocking(MonitoringClient.objects)
    object = _blocking(MonitoringClient.object)
    units = _blocking(MonitoringClient.units)
    physical_params = _blocking(MonitoringClient.physical_params)
    calculated_params = _blocking(MonitoringClient.calculated_params)
    object_physical_params = _blocking(MonitoringClient.object_physical_params)
    object_calculated_params = _blocking(MonitoringClient.object_calculated_params)
    object_params = _blocking(MonitoringClient.object_params)
    search_page = _blocking(MonitoringClient.search_page)
    search_params = _blocking(MonitoringClient.search_params)
    measure_raw = _blocking(MonitoringClient.measure_raw)
    measure_average = _blocking(MonitoringClient.measure_average)
    measure_candles = _blocking(MonitoringClient.measure_candles)
    calc_raw = _blocking(MonitoringClient.calc_raw)
    calc_average = _blocking(MonitoringClient.calc_average)
    calc_candles = _blocking(MonitoringClient.calc_candles)
    signal = _blocking(MonitoringClient.signal)
    measure_average_alt = _blocking(MonitoringClient.measure_average_alt)
    measure_candles_alt = _blocking(MonitoringClient.measure_candles_alt)
    series = _blocking(MonitoringClient.series)
    param_status = _blocking(MonitoringClient.param_status)
    set_value = _blocking(MonitoringClient.set_value)
    ext_commands = _blocking(MonitoringClient.ext_commands)
    run_command = _blocking(MonitoringClient.run_command)
    zones = _blocking(MonitoringClient.zones)
    classifiers = _blocking(MonitoringClient.classifiers)
    room_types = _blocking(MonitoringClient.room_types)
    rooms = _blocking(MonitoringClient.rooms)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._client.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncMonitoringClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
