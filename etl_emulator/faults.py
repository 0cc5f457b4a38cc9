"""Fault injection: what can go wrong, how often, and the seeded decision for each request; and the
choices a real server may make where the document is silent (how an ended session, an error or a
count is answered), which every answer follows."""

from __future__ import annotations

import dataclasses
import random
import threading
from dataclasses import dataclass, field
from typing import Any

HOSTILE_KINDS = (
    "nan",
    "null",
    "duplicates",
    "shuffle",
    "outside",
    "extra_fields",
    "missing_fields",
    "empty_body",
    "html_200",
    "wrong_content_type",
    "offsets",
    "no_millis",
    "huge",
    "error_200",
    "empty_object",
    "points_null",
    "misspelled",
    "duplicate_key",
    "epoch_seconds",
    "date_only",
    "conflicting",
    "infinity",
    "string_values",
    "bool_values",
    "huge_stamps",
    "deep_nesting",
    "stuck",
    "drip",
    "endless",
    "gzip_bomb",
    "huge_headers",
    "gzip_corrupt",
)
# Odd records in the object listing and the parameter lists (every answer, not drawn), see hostile.py.
RECORD_KINDS = (
    "surrogate_name",
    "deep_record",
    "huge_id",
    "text_id",
    "fractional_id",
    "control_names",
    "mathtext_names",
)
ERROR_STATUSES = (500, 502, 503)
SESSION_ENDS = ("401", "403", "302-login", "302-home", "html-login")
ERROR_BODIES = ("json", "html", "text", "empty")
SIGN_IN_FORMS = ("both", "query", "form")
# How error answers repeat the request's fields (sign-in's username and password among them), see
# answers.echoing; "none": they do not.
ECHOES = ("none", "query", "raw", "partial", "base64", "basic", "json-unicode", "html")
TYPE_FIELDS = ("type", "paramType")
TYPE_SHAPES = ("text", "object")
SIGNAL_MARKERS = ("type", "flag")
SEARCH_ENVELOPES = ("array", "items", "spring", "data")


@dataclass
class Faults:
    """Fault settings. Rates are probabilities per request; times are seconds; None disables a limit.
    The fields from `session_end` on are not drawn: they fix how the server answers, every time."""

    error_rate: float = 0.0  # 500/502/503, half JSON bodies, half HTML pages
    rate_limit_rate: float = 0.0  # 429 with Retry-After
    # Parameters whose every request answers 429 with Retry-After (not drawn): a throttle on some only.
    throttled_params: tuple[int, ...] = ()
    retry_after: float = 1.0
    retry_after_text: str | None = None  # sent as the Retry-After header instead (e.g. "soon", "inf")
    latency: float = 0.0  # added to every answer
    latency_spike_rate: float = 0.0
    latency_spike: float = 2.0
    session_max_requests: int | None = None  # a session dies after serving this many requests
    session_max_age: float | None = None
    truncate_rate: float = 0.0  # 200 with the JSON body cut in half
    drop_rate: float = 0.0  # connection closed mid-answer
    hostile: tuple[str, ...] = ()  # odd but 200 answers on series routes, see HOSTILE_KINDS
    hostile_rate: float = 1.0  # of series answers, when `hostile` names any kind
    bomb_mb: int = 1024  # what a `gzip_bomb` answer expands to, MiB
    odd_records: tuple[str, ...] = ()  # in the object listing and parameter lists, see RECORD_KINDS
    echo_params: str = "none"  # error answers repeat the request's fields, see ECHOES
    seed: int = 0
    session_end: str = "401"  # how a call without a live session is answered, see SESSION_ENDS
    error_body: str = "json"  # body of every 4xx/5xx of the platform, see ERROR_BODIES
    sign_in_via: str = "both"  # where sign-in reads the credentials: query string, form body or both
    max_count: int | None = None  # points or buckets per series answer, whatever the count asked
    count_default: int = 10_000  # the count of a series request without one
    count_reject_over: int | None = None  # a larger count answers 400 (None: clamped, see measurements)
    type_field: str = "type"  # the field of a parameter record that names its type, see TYPE_FIELDS
    type_shape: str = "text"  # the type as text or as an object {id, name}, see TYPE_SHAPES
    signal_marker: str = "type"  # a signal is marked by its type or a flag, see SIGNAL_MARKERS
    search_envelope: str = "array"  # the body of a page of /search/params, see SEARCH_ENVELOPES
    # The server's capacity (capacity.py): workers, each busy service_time a request; past queue_max
    # requests waiting for one, 503. None: no bound.
    capacity: int | None = None
    service_time: float = 0.0
    queue_max: int | None = None

    def __post_init__(self) -> None:
        self.session_end = str(self.session_end)
        for name, choices in (
            ("session_end", SESSION_ENDS),
            ("error_body", ERROR_BODIES),
            ("sign_in_via", SIGN_IN_FORMS),
            ("echo_params", ECHOES),
            ("type_field", TYPE_FIELDS),
            ("type_shape", TYPE_SHAPES),
            ("signal_marker", SIGNAL_MARKERS),
            ("search_envelope", SEARCH_ENVELOPES),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        for name, optional, least in (
            ("max_count", True, 1),
            ("count_default", False, 1),
            ("count_reject_over", True, 1),
            ("bomb_mb", False, 1),
            ("capacity", True, 1),
            ("queue_max", True, 0),
        ):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(
                    f"{name} must be an integer of at least {least}" + (" or null" if optional else "")
                )
        if (
            isinstance(self.service_time, bool)
            or not isinstance(self.service_time, int | float)
            or self.service_time < 0
        ):
            raise ValueError("service_time must be a number of seconds, at least 0")
        given: Any = self.throttled_params  # a list from JSON, a comma-separated string
        ids = [i for i in given.split(",") if i.strip()] if isinstance(given, str) else list(given)
        try:
            self.throttled_params = tuple(int(i) for i in ids)
        except (TypeError, ValueError):
            raise ValueError(f"throttled_params must be parameter ids, got {ids!r}") from None
        for name, known in (("hostile", HOSTILE_KINDS), ("odd_records", RECORD_KINDS)):
            kinds = getattr(self, name)
            kinds = tuple(k for k in kinds.split(",") if k) if isinstance(kinds, str) else tuple(kinds)
            setattr(self, name, kinds)
            unknown = set(kinds) - set(known)
            if unknown:
                raise ValueError(f"unknown {name} kind(s) {sorted(unknown)}; known: {', '.join(known)}")
        for name in (
            "error_rate",
            "rate_limit_rate",
            "latency_spike_rate",
            "truncate_rate",
            "drop_rate",
            "hostile_rate",
        ):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")

    def as_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "hostile": list(self.hostile),
            "odd_records": list(self.odd_records),
            "throttled_params": list(self.throttled_params),
        }

    def updated(self, changes: dict[str, Any]) -> Faults:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown fault setting(s) {sorted(unknown)}; known: {', '.join(sorted(names))}")
        return dataclasses.replace(self, **changes)

    @property
    def active(self) -> bool:
        return bool(
            self.error_rate
            or self.rate_limit_rate
            or self.throttled_params
            or self.latency
            or self.latency_spike_rate
            or self.truncate_rate
            or self.drop_rate
            or (self.hostile and self.hostile_rate)
        )


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

    def decide(self, *, sign_in: bool, series: bool, param_id: int | None = None) -> Decision | None:
        """`param_id`: the parameter the request names, if any (`throttled_params`)."""
        f = self.faults
        if not f.active:
            return None
        d = Decision(delay=f.latency)
        if param_id is not None and param_id in f.throttled_params:
            d.rate_limited = True  # not drawn: the other draws of this request are not made
            return d
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


def retry_after_header(seconds: float, text: str | None = None) -> bytes:
    """Whole seconds when whole, else a decimal (clients here accept both); `text` as it is, if given."""
    if text is not None:
        return text.encode("latin-1")
    return str(int(seconds) if float(seconds).is_integer() else seconds).encode()
