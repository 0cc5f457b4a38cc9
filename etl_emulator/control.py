"""The control API under /_emulator (no sign-in): health, the request log, faults, the clock, the
fleet's changes (objects and parameters added or removed while serving), the command runs and each
parameter's documented gaps. It is the test harness's channel, so its errors are always JSON.

It changes what the emulator does, so it answers only requests addressed to the emulator itself: the
Host header must name a loopback name, an IP address or the host it serves on (a web page cannot reach
it through a domain of its own that resolves to 127.0.0.1: DNS rebinding). `gaps` takes at most
`GAPS_MAX_DAYS` days at a time.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import orjson

from etl_emulator.answers import Answer, Receive, Record, Refusal, Scope, bad, not_found, read_body
from etl_emulator.dataset import Dataset
from etl_emulator.faults import FaultPlan
from etl_emulator.series import gaps
from etl_emulator.state import Clock, RequestLog

PREFIX = "/_emulator/"
GAPS_MAX_DAYS = 3660  # ten years of daily gaps a request: a few hundred kB of JSON
DAY_MS = 86_400_000
LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


def _host_of(scope: Scope) -> str:
    """The host name of the request's Host header, without its port or brackets."""
    host = next((v for k, v in scope["headers"] if k == b"host"), b"").decode("latin-1").strip().lower()
    if host.startswith("["):  # [::1]:8765
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _json_body(receive: Receive) -> dict[str, Any]:
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
        runs: list[Record],
        base_path: str,
        host: str = "127.0.0.1",
        on_faults: Callable[[], None] = lambda: None,
        on_fleet: Callable[[Dataset], None] = lambda _: None,
    ) -> None:
        """`on_faults`: told after the faults change (the workers take a new capacity at once);
        `on_fleet`: given the dataset the fleet's change made, which every handler serves from then on."""
        self.dataset, self.clock, self.plan, self.log, self.runs = dataset, clock, plan, log, runs
        self.on_faults, self.on_fleet = on_faults, on_fleet
        self.base_path = base_path
        self.host = host.lower()

    def _addressed_to_me(self, scope: Scope) -> bool:
        host = _host_of(scope)
        if host in LOOPBACK_NAMES or host == self.host:
            return True
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return False
        return True

    async def answer(self, scope: Scope, receive: Receive, what: str) -> Answer:
        method = scope["method"]
        try:
            if not self._addressed_to_me(scope):
                raise Refusal(
                    403, "forbidden", "the control API answers requests addressed to this host only"
                )
            doc = await _json_body(receive) if method == "PUT" else {}
            handlers: dict[tuple[str, str], Callable[[], object]] = {
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
                ("GET", "fleet"): self._fleet,
                ("PUT", "fleet"): lambda: self._set_fleet(doc),
                ("GET", "commands"): lambda: self.runs,
                ("GET", "gaps"): lambda: self._gaps(scope),
            }
            handler = handlers.get((method, what.strip("/")))
            if handler is None:
                raise not_found(f"control path {PREFIX}{what} ({method})")
            return Answer(orjson.dumps(handler()))
        except Refusal as exc:
            return Answer(exc.body(), exc.status)

    def _set_faults(self, doc: Record) -> Record:
        try:
            faults = self.plan.update(doc)
        except (ValueError, TypeError) as exc:
            raise bad(str(exc)) from None
        self.on_faults()
        return faults.as_dict()

    def _gaps(self, scope: Scope) -> list[Record]:
        """?param=ID&start=MS&end=MS: the parameter's silent spans [start, end) that overlap the window."""
        query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode("latin-1")).items()}
        try:
            param, start, end = (int(query[name]) for name in ("param", "start", "end"))
        except (KeyError, ValueError):
            raise bad("gaps takes the integers param, start and end (epoch ms)") from None
        if not 0 <= end - start <= GAPS_MAX_DAYS * DAY_MS:
            raise bad(f"gaps takes a window of 0 to {GAPS_MAX_DAYS} days (start <= end)")
        try:
            spans = gaps(self.dataset, param, start, end)
        except KeyError:
            raise not_found(f"parameter {param}") from None
        return [{"start": lo, "end": hi} for lo, hi in spans]

    def _fleet(self) -> Record:
        ds = self.dataset
        return {"objects": ds.objects, "added": list(ds.added), "removed": list(ds.removed)}

    def _set_fleet(self, doc: Record) -> Record:
        """{"objects": N, "added": [param ids], "removed": [param ids]}, any of them: the fleet from now on."""
        unknown = set(doc) - {"objects", "added", "removed"}
        if unknown:
            raise bad(f"unknown fleet setting(s) {sorted(unknown)}; known: added, objects, removed")
        objects = doc.get("objects", self.dataset.objects)
        lists = [doc.get(name, getattr(self.dataset, name)) for name in ("added", "removed")]
        if (
            isinstance(objects, bool)
            or not isinstance(objects, int)
            or objects < 0
            or not all(isinstance(ids, list | tuple) for ids in lists)
            or not all(isinstance(i, int) and not isinstance(i, bool) for ids in lists for i in ids)
        ):
            raise bad("objects is a count, added and removed lists of parameter ids")
        try:
            self.dataset = dataclasses.replace(
                self.dataset, objects=objects, added=tuple(lists[0]), removed=tuple(lists[1])
            )
        except ValueError as exc:
            raise bad(str(exc)) from None
        self.on_fleet(self.dataset)
        return self._fleet()

    def _clock(self) -> Record:
        return {"now": self.clock.fixed, "current": self.clock.now()}

    def _set_clock(self, doc: Record) -> Record:
        now = doc.get("now")
        if now is not None and (isinstance(now, bool) or not isinstance(now, int)):
            raise bad("now must be epoch milliseconds (integer) or null")
        self.clock.fixed = now
        return self._clock()
