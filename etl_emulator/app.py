"""The emulator as a raw ASGI app: every endpoint of the document under the base path (routed to the
catalog, measurement and session handlers, with faults drawn per request), plus the control API under
/_emulator. Raw ASGI (no framework) keeps the per-request cost low."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs

import orjson

from etl_emulator import records
from etl_emulator.accounts import accounts
from etl_emulator.answers import (
    HTML,
    Answer,
    Receive,
    Refusal,
    Scope,
    Send,
    echoing,
    error_page,
    not_found,
    read_body,
    refused,
    send_answer,
    send_partial,
)
from etl_emulator.capacity import Workers
from etl_emulator.catalog import Catalog
from etl_emulator.config import EmulatorConfig
from etl_emulator.control import PREFIX, ControlApi
from etl_emulator.dataset import Dataset, as_dataset
from etl_emulator.faults import Decision, FaultPlan, retry_after_header
from etl_emulator.measurements import Measurements
from etl_emulator.routing import Call, Route, Router
from etl_emulator.sessions import ServerSession, SessionEnded, Sessions, session_end_answer
from etl_emulator.state import Clock, RequestLog

CONFIG_ENV = "ETL_EMULATOR_CONFIG"
_DROP_MESSAGE = "ASGI callable returned without completing response."


class _DropFilter(logging.Filter):
    """A dropped connection is deliberate; keep uvicorn from reporting it as an app error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _DROP_MESSAGE


class Emulator:
    """The ASGI app. Its state is per process: with several uvicorn workers each has its own faults,
    clock, request log, command runs, setvalue points and session request counts; a session opened
    by one worker is accepted by all (see sessions.py)."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.dataset = as_dataset(config)
        self.base_path = "/" + config.base_path.strip("/") if config.base_path.strip("/") else ""
        self.clock = Clock(config.now_ms)
        self.plan = FaultPlan(config.faults)
        self.log = RequestLog(config.request_log)
        self.session_store = Sessions(
            accounts(config.users, self.dataset.object_ids), self.base_path, self.plan
        )
        self.catalog = Catalog(self.dataset, self.clock, self.plan)
        self.measurements = Measurements(self.dataset, self.clock, self.plan)
        self.workers = Workers(self.plan)
        self.control = ControlApi(
            self.dataset,
            self.clock,
            self.plan,
            self.log,
            self.catalog.runs,
            self.base_path,
            config.host,
            on_faults=self.workers.settle,
            on_fleet=self._serve_fleet,
        )
        self.router = Router(self._routes())
        self._date: tuple[int, bytes] = (-1, b"")  # the Date header of the clock's current second
        uvicorn_log = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, _DropFilter) for f in uvicorn_log.filters):
            uvicorn_log.addFilter(_DropFilter())

    def _serve_fleet(self, dataset: Dataset) -> None:
        """The fleet as the control API changed it, served by every handler from now on."""
        self.dataset = self.catalog.dataset = self.measurements.dataset = dataset

    @property
    def sessions(self) -> dict[str, ServerSession]:
        """The sessions this process knows, by id."""
        return self.session_store.live

    def close(self) -> None:
        self.log.close()

    def _routes(self) -> list[Route]:
        r, c, m = Route, self.catalog, self.measurements
        routes = [
            r("POST", "auth/login", self.session_store.sign_in, sign_in=True),
            r("GET", "db/object/shortest", c.objects_short),
            r("GET", "db/object", c.objects),
            r("GET", "db/object/{object_id}", c.object),
            r("GET", "db/object/{object_id}/unit", c.units),
            r("GET", "db/object/{object_id}/cdp", functools.partial(c.object_params, physical=True)),
            r("GET", "db/object/{object_id}/ccp", functools.partial(c.object_params, physical=False)),
            r("GET", "db/object/{object_id}/params", c.all_object_params),
            r("GET", "db/contrdeviceparam", functools.partial(c.param_list, physical=True, short=False)),
            r(
                "GET",
                "db/contrdeviceparam/shortest",
                functools.partial(c.param_list, physical=True, short=True),
            ),
            r("GET", "db/contrcalcparam", functools.partial(c.param_list, physical=False, short=False)),
            r(
                "GET",
                "db/contrcalcparam/shortest",
                functools.partial(c.param_list, physical=False, short=True),
            ),
            r("GET", "search/params", c.search_params),
            r("GET", "db/contrdeviceparam/{param_id}/state", m.param_state),
            r("POST", "db/contrdeviceparam/{param_id}/setvalue", m.set_value),
            r("GET", "extcommand", c.ext_commands),
            r("POST", "db/unit/{device_id}/command", c.run_command),
            r("POST", "db/zone", lambda _: orjson.dumps(records.ZONES)),
            r("POST", "deviceclassifier", lambda _: orjson.dumps(records.CLASSIFIERS)),
            r("POST", "sensor_location", lambda _: orjson.dumps(records.ROOM_TYPES)),
            r("POST", "room", c.rooms),
        ]
        templates = [
            ("db/measure/{id}/{s}/{e}", "physical", "raw"),
            ("db/calcvalue/{id}/{s}/{e}", "calculated", "raw"),
            ("db/signal/{id}/{s}/{e}", "signal", "raw"),
        ]
        for kind in ("average", "candles"):
            templates += [
                (f"db/measure/{kind}/{{id}}/{{s}}/{{e}}", "physical", kind),
                (f"db/measure/{{id}}/{kind}/{{s}}/{{e}}", "physical", kind),
                (f"db/calcvalue/{kind}/{{id}}/{{s}}/{{e}}", "calculated", kind),
            ]
        for template, source, kind in templates:
            routes.append(
                r(
                    "GET",
                    template,
                    functools.partial(m.series, source=source, kind=kind),
                    series=(source, kind),
                )
            )
        return routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path.startswith(self.base_path + "/"):
            await self._api(scope, receive, send, path[len(self.base_path) :])
        elif path.startswith(PREFIX):
            await send_answer(send, await self.control.answer(scope, receive, path[len(PREFIX) :]))
        else:
            # Logged too: a client looking for the base path (etl init) is counted by every request it makes.
            answer = refused(not_found(f"path {path}"), self.plan.faults.error_body)
            query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            self.log.record(
                {
                    "ts": time.time_ns() // 1_000_000,
                    "method": scope["method"],
                    "path": path,
                    "query": _loggable(query),
                    "status": answer.status,
                    "outside": True,
                }
            )
            await send_answer(send, answer)

    async def _api(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        method = scope["method"]
        query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        entry: dict[str, Any] = {
            "ts": time.time_ns() // 1_000_000,
            "method": method,
            "path": scope["path"],
            "query": _loggable(query),
        }
        decision = None
        form: bytes | None = None  # a sign-in's form body, once read
        try:
            route, args = self.router.match(method, path)
            if route.series:
                entry["param_id"], entry["interval_ms"] = args[0], args[2] - args[1]
            elif "{param_id}" in route.template:
                entry["param_id"] = args[0]
            decision = self.plan.decide(
                sign_in=route.sign_in, series=route.series is not None, param_id=entry.get("param_id")
            )
            if decision and decision.delay:
                await asyncio.sleep(decision.delay)
            answer = self._fault_answer(decision) if decision else None
            if answer is None:
                answer, form = await self._served(
                    scope, receive, route, args, method, path, query, decision, entry
                )
        except SessionEnded as ended:
            f = self.plan.faults
            answer = session_end_answer(ended, f.session_end, self.base_path, f.error_body)
            entry["session_ended"] = True
        except Refusal as exc:
            answer = refused(exc, self.plan.faults.error_body)
        echo = self.plan.faults.echo_params
        if answer.status >= 400 and echo != "none":
            if form is None:
                form = await _form_body(scope, receive)
            answer = echoing(answer, echo, scope["query_string"], form)
        entry["status"] = answer.status
        if isinstance(answer.body, bytes | bytearray):
            entry["bytes"] = len(answer.body)  # of the body as made, before any compression on the wire
        if decision:
            fault = (
                "drop"
                if decision.drop
                else f"error_{decision.error}"
                if decision.error
                else "rate_limit"
                if decision.rate_limited
                else None
            )
            if answer.status == 200 and not decision.drop:
                if decision.truncate:
                    answer.body = answer.body[: len(answer.body) // 2]
                    fault = "truncate"
                elif decision.hostile:
                    fault = f"hostile_{decision.hostile}"
            if fault:
                entry["fault"] = fault
        self.log.record(entry)
        if self.config.date_header:
            answer.headers.append((b"date", self._date_header()))
        if decision and decision.drop:
            await send_partial(send, answer)
        else:
            await send_answer(send, answer, receive)

    async def _served(
        self,
        scope: Scope,
        receive: Receive,
        route: Route,
        args: tuple[int, ...],
        method: str,
        path: str,
        query: dict[str, list[str]],
        decision: Decision | None,
        entry: dict[str, Any],
    ) -> tuple[Answer, bytes | None]:
        """The handler's answer, by one of the server's workers (capacity.py), and a sign-in's form body
        once read: the time the request spent in the server, waiting for one and served, goes in the log
        (`server_ms`, `queue_ms`)."""
        arrived = time.perf_counter()
        if not await self.workers.enter():
            entry["fault"] = "shed"
            entry["server_ms"] = entry["queue_ms"] = 0.0
            busy = Refusal(503, "server_busy", "too many requests waiting")
            return refused(busy, self.plan.faults.error_body), None
        entry["queue_ms"] = round((time.perf_counter() - arrived) * 1000, 2)
        form: bytes | None = None
        try:
            if self.plan.faults.service_time:
                await asyncio.sleep(self.plan.faults.service_time)
            call = Call(method, path, query, args, decision=decision)
            if route.sign_in:
                form = await _form_body(scope, receive)
                call.form = parse_qs(form.decode("utf-8", "replace"), keep_blank_values=True)
                if call.form:
                    entry["form"] = _loggable(call.form)
            else:
                call.account = self.session_store.check(scope["headers"])
            result = route.handler(call)
            return (result if isinstance(result, Answer) else Answer(result)), form
        finally:
            self.workers.leave()
            entry["server_ms"] = round((time.perf_counter() - arrived) * 1000, 2)

    def _date_header(self) -> bytes:
        """The emulator's clock as an HTTP Date (as an origin server with a clock sends it): clients may
        read the server's time there."""
        second = self.clock.now() // 1000
        if self._date[0] != second:
            self._date = (second, formatdate(second, usegmt=True).encode())
        return self._date[1]

    def _fault_answer(self, d: Decision) -> Answer | None:
        style = self.plan.faults.error_body
        if d.error:
            if d.error_html and style == "json":  # the JSON style keeps the proxy pages of a real outage
                return Answer(error_page(d.error), d.error, HTML)
            return refused(Refusal(d.error, "server_error", "injected server error"), style)
        if d.rate_limited:
            return refused(
                Refusal(429, "too_many_requests", "rate limit exceeded"),
                style,
                [
                    (
                        b"retry-after",
                        retry_after_header(self.plan.faults.retry_after, self.plan.faults.retry_after_text),
                    )
                ],
            )
        return None


def _loggable(fields: dict[str, list[str]]) -> dict[str, str | list[str]]:
    """Query or form fields for the request log: a value, or a list when repeated; never the password."""
    return {k: v[0] if len(v) == 1 else v for k, v in fields.items() if k != "password"}


async def _form_body(scope: Scope, receive: Receive) -> bytes:
    """A form-encoded body (application/x-www-form-urlencoded) as received; any other: none."""
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
    if content_type.split(b";")[0].strip().lower() != b"application/x-www-form-urlencoded":
        return b""
    return await read_body(receive)


def create_app(config: EmulatorConfig) -> Emulator:
    """The ASGI app for one emulator configuration."""
    return Emulator(config)


def app_from_env() -> Emulator:
    """Factory for uvicorn workers: the configuration comes as JSON in $ETL_EMULATOR_CONFIG."""
    return create_app(EmulatorConfig.from_json(os.environ[CONFIG_ENV]))
