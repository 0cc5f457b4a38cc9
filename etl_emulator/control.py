"""The control API under /_emulator (no sign-in): health, the request log, faults, the clock, the
command runs and each parameter's documented gaps. It is the test harness's channel, so its errors are always JSON."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import orjson

from etl_emulator.answers import Answer, Refusal, bad, not_found, read_body
from etl_emulator.dataset import Dataset
from etl_emulator.faults import FaultPlan
from etl_emulator.series import gaps
from etl_emulator.state import Clock, RequestLog

PREFIX = "/_emulator/"


async def _json_body(receive: Callable) -> dict[str, Any]:
    body = await read_body(receive)
    try:
        doc = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        raise bad("the body must be JSON") from None
    if not isinstance(doc, dict):
        raise bad("the body must be a JSON object")
    return doc


class ControlApi:
    """Reads and changes the per-process state of one emulator."""

    def __init__(
        self,
        dataset: Dataset,
        clock: Clock,
        plan: FaultPlan,
        log: RequestLog,
        runs: list[dict],
        base_path: str,
    ) -> None:
        self.dataset, self.clock, self.plan, self.log, self.runs = dataset, clock, plan, log, runs
        self.base_path = base_path

    async def answer(self, scope: dict, receive: Callable, what: str) -> Answer:
        method = scope["method"]
        try:
            doc = await _json_body(receive) if method == "PUT" else {}
            handler = {
                ("GET", "health"): lambda: {
                    "status": "ok",
                    "pid": os.getpid(),
                    "base_path": self.base_path,
                    "now": self.clock.now(),
                },
                ("GET", "requests"): lambda: list(self.log.entries),
                ("DELETE", "requests"): lambda: {"cleared": self.log.clear()},
                ("GET", "faults"): lambda: self.plan.faults.as_dict(),
                ("PUT", "faults"): lambda: self._set_faults(doc),
                ("GET", "clock"): self._clock,
                ("PUT", "clock"): lambda: self._set_clock(doc),
                ("GET", "commands"): lambda: self.runs,
                ("GET", "gaps"): lambda: self._gaps(scope),
            }.get((method, what.strip("/")))
            if handler is None:
                raise not_found(f"control path {PREFIX}{what} ({method})")
            return Answer(orjson.dumps(handler()))
        except Refusal as exc:
            return Answer(exc.body(), exc.status)

    def _set_faults(self, doc: dict) -> dict:
        try:
            return self.plan.update(doc).as_dict()
        except (ValueError, TypeError) as exc:
            raise bad(str(exc)) from None

    def _gaps(self, scope: dict) -> list[dict]:
        """?param=ID&start=MS&end=MS: the parameter's silent spans [start, end) that overlap the window."""
        query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode("latin-1")).items()}
        try:
            param, start, end = (int(query[name]) for name in ("param", "start", "end"))
        except (KeyError, ValueError):
            raise bad("gaps takes the integers param, start and end (epoch ms)") from None
        try:
            spans = gaps(self.dataset, param, start, end)
        except KeyError:
            raise not_found(f"parameter {param}") from None
        return [{"start": lo, "end": hi} for lo, hi in spans]

    def _clock(self) -> dict:
        return {"now": self.clock.fixed, "current": self.clock.now()}

    def _set_clock(self, doc: dict) -> dict:
        now = doc.get("now")
        if now is not None and (isinstance(now, bool) or not isinstance(now, int)):
            raise bad("now must be epoch milliseconds (integer) or null")
        self.clock.fixed = now
        return self._clock()
