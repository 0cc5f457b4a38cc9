"""Fault injection: what can go wrong, how often, and the seeded decision for each request."""

from __future__ import annotations

import dataclasses
import random
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

HOSTILE_KINDS = (
    "nan", "null", "duplicates", "shuffle", "outside", "extra_fields", "missing_fields", "empty_body",
    "html_200", "wrong_content_type", "offsets", "no_millis", "huge",
)
ERROR_STATUSES = (500, 502, 503)
SESSION_ENDS = ("401", "403", "302-login", "302-home", "html-login")  # how a request without a live session is answered
HUGE_BYTES = 4 * 1024 * 1024


@dataclass
class Faults:
    """Fault settings. Rates are probabilities per request; times are seconds; None disables a limit."""

    error_rate: float = 0.0  # 500/502/503, half JSON bodies, half HTML pages
    rate_limit_rate: float = 0.0  # 429 with Retry-After
    retry_after: float = 1.0
    latency: float = 0.0  # added to every answer
    latency_spike_rate: float = 0.0
    latency_spike: float = 2.0
    session_max_requests: int | None = None  # a session dies after serving this many requests
    session_max_age: float | None = None
    truncate_rate: float = 0.0  # 200 with the JSON body cut in half
    drop_rate: float = 0.0  # connection closed mid-answer
    hostile: tuple[str, ...] = ()  # odd but 200 answers on series routes, see HOSTILE_KINDS
    hostile_rate: float = 1.0  # of series answers, when `hostile` names any kind
    max_count: int | None = None  # series answers silently hold at most this many points (the first ones)
    session_end: str = "401"  # the answer to a request without a live session, see SESSION_ENDS
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.hostile, str):
            self.hostile = tuple(k for k in self.hostile.split(",") if k)
        self.hostile = tuple(self.hostile)
        unknown = set(self.hostile) - set(HOSTILE_KINDS)
        if unknown:
            raise ValueError(f"unknown hostile kind(s) {sorted(unknown)}; known: {', '.join(HOSTILE_KINDS)}")
        for name in ("error_rate", "rate_limit_rate", "latency_spike_rate", "truncate_rate", "drop_rate",
                     "hostile_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        if self.max_count is not None and self.max_count < 1:
            raise ValueError("max_count must be at least 1")
        if self.session_end not in SESSION_ENDS:
            raise ValueError(f"session_end must be one of {', '.join(SESSION_ENDS)}")

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "hostile": list(self.hostile)}

    def updated(self, changes: dict[str, Any]) -> Faults:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown fault setting(s) {sorted(unknown)}; known: {', '.join(sorted(names))}")
        return dataclasses.replace(self, **changes)

    @property
    def active(self) -> bool:
        return bool(self.error_rate or self.rate_limit_rate or self.latency or self.latency_spike_rate
                    or self.truncate_rate or self.drop_rate or (self.hostile and self.hostile_rate))


@dataclass
class Decision:
    """What happens to one request; all fields default to 'nothing'."""

    delay: float = 0.0
    drop: bool = False
    error: int | None = None
    error_html: bool = False
    rate_limited: bool = False
    truncate: bool = False
    hostile: str | None = None
    salt: int = 0  # seeds the hostile edits of this answer


@dataclass
class FaultPlan:
    """The current settings and a seeded generator; decisions are drawn under a lock."""

    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(self.faults.seed)

    def update(self, changes: dict[str, Any]) -> Faults:
        """Apply changes (a 'reset': true entry starts from no faults); a new seed restarts the draws."""
        changes = dict(changes)
        reset = bool(changes.pop("reset", False))
        new = (Faults() if reset else self.faults).updated(changes)
        with self._lock:
            self.faults = new
            if reset or "seed" in changes:
                self._rng = random.Random(new.seed)
        return new

    def decide(self, *, sign_in: bool, series: bool) -> Decision | None:
        f = self.faults
        if not f.active:
            return None
        d = Decision(delay=f.latency)
        with self._lock:
            rnd = self._rng.random
            if f.latency_spike_rate and rnd() < f.latency_spike_rate:
                d.delay += f.latency_spike
            if f.drop_rate and rnd() < f.drop_rate:
                d.drop = True
            elif f.error_rate and rnd() < f.error_rate:
                d.error = self._rng.choice(ERROR_STATUSES)
                d.error_html = rnd() < 0.5
            elif f.rate_limit_rate and rnd() < f.rate_limit_rate:
                d.rate_limited = True
            elif not sign_in and f.truncate_rate and rnd() < f.truncate_rate:
                d.truncate = True
            elif series and f.hostile and rnd() < f.hostile_rate:
                d.hostile = self._rng.choice(f.hostile)
                d.salt = self._rng.getrandbits(32)
        return d


def retry_after_header(seconds: float) -> bytes:
    """Whole seconds when whole, else a decimal (clients here accept both)."""
    return str(int(seconds) if float(seconds).is_integer() else seconds).encode()


def error_page(status: int) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{status} Error</title></head><body><h1>{status}</h1>"
            "<p>The server encountered a temporary error and could not complete your request.</p>"
            "</body></html>").encode()


LOGIN_PAGE = (b"<!DOCTYPE html><html><head><title>Sign in</title></head><body><form method=\"post\" action=\"login\">"
              b"<input name=\"username\"><input type=\"password\" name=\"password\"><button>Sign in</button>"
              b"</form></body></html>")
HTML_200 = (b"<!DOCTYPE html><html><head><title>Maintenance</title></head><body>"
            b"<h1>Scheduled maintenance</h1><p>The service will be back shortly.</p></body></html>")


# -- hostile answers on series routes --------------------------------------------------------------

def _iso(ts: np.ndarray, *, offset_hours: int = 0, millis: bool = True) -> list[str]:
    local = (ts + offset_hours * 3_600_000).astype("datetime64[ms]")
    text = (local if millis else local.astype("datetime64[s]")).astype(str)
    suffix = f"{offset_hours:+03d}:00" if offset_hours else "Z"
    return [s + suffix for s in text.tolist()]


def hostile_body(kind: str, salt: int, param_id: int, columns: dict[str, np.ndarray], candles: bool,
                 start_ms: int, end_ms: int) -> tuple[bytes, bytes]:
    """(body, content type) of a series answer edited the `kind` way.

    `columns` holds "ts" (epoch ms) and the value columns ("value", or "open", "high", "low",
    "close"). Timestamps are ISO strings in point answers and epoch ms in candles, except that
    `offsets` (same instant, written at +03:00) and `no_millis` (floored to the second, written
    without milliseconds) write ISO strings in candles too.
    """
    if kind == "empty_body":
        return b"", b"application/json"
    if kind == "html_200":
        return HTML_200, b"text/html; charset=utf-8"
    rng = np.random.default_rng(salt)
    ts = columns["ts"].astype(np.int64)
    fields = [k for k in columns if k != "ts"]
    values = {k: columns[k].astype(object) for k in fields}
    n = len(ts)
    order = np.arange(n)
    if kind in ("nan", "null") and n:
        hit = rng.random(n) < 0.2
        hit[rng.integers(n)] = True
        for k in fields:
            values[k][hit] = None
    elif kind == "duplicates" and n:
        order = np.sort(np.r_[order, rng.choice(n, size=max(1, n // 10))])
    elif kind == "shuffle":
        order = rng.permutation(n)
    elif kind == "outside":
        ts = np.r_[start_ms - 60_000, ts, end_ms + 60_000]
        for k in fields:
            edge = columns[k][:1].tolist() or [0.0]
            values[k] = np.r_[np.array(edge, dtype=object), values[k], np.array(edge, dtype=object)]
        order = np.arange(n + 2)
    if kind == "offsets":
        stamps: list = _iso(ts, offset_hours=3)
    elif kind == "no_millis":
        stamps = _iso(ts, millis=False)
    elif candles:
        stamps = ts.tolist()
    else:
        stamps = _iso(ts)
    rows = [dict(zip(("timestmp", *fields), row, strict=True))
            for row in zip(*(np.asarray(stamps, dtype=object)[order], *(values[k][order] for k in fields)),
                           strict=True)]
    doc: dict[str, Any] = {"id": param_id, "candles" if candles else "points": rows}
    if kind == "extra_fields":
        for row in rows:
            row["quality"] = "good"
        doc["meta"] = {"source": "emulator", "version": 2}
    elif kind == "missing_fields":
        del doc["id"]
    elif kind == "huge":
        doc["padding"] = "x" * HUGE_BYTES
    body = orjson.dumps(doc)
    if kind == "nan":
        body = body.replace(b":null", b":NaN")
    return body, (b"text/plain; charset=utf-8" if kind == "wrong_content_type" else b"application/json")
