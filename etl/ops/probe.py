"""Polite, bounded probes of a platform instance: what it chose where the document is silent.

Shared by `etl init` (the findings become a config) and `etl doctor` (they are compared with one). Every
request goes through the client's session, as those of `etl run` do, and is counted, so a probe says how
many it made; each step asks a bounded few things whatever the instance's size (three sample objects,
three sample parameters, a page budget): about 25 requests on a small instance, never more than about 50.

    base URL       POST {url}/auth/login, then {url}/sem-restservices/auth/login: the first that exists
    sign-in        credentials as query parameters, then as a form body (or the configured way first)
    error body     an unknown object (404) asked within the session: JSON, HTML, text or empty
    session end    a call without session cookies: how the server answers a session that is gone
    objects        /db/object/shortest; parameters by kind from the lists of up to three sample objects,
                   and how their records write the type (text, or an object {id, name})
    discovery      /search/params over the sample objects, compared with their lists
    count          the densest raw day of up to three sample parameters, asked with a large count, its
                   rest, and without a count; when no raw day is dense enough, a long averaged span
    stamps         the raw answers' timestmp strings, as a pattern
    latency        the median time to a whole answer, over the probe's GET requests
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, get_args
from urllib.parse import urlsplit

import httpx

from etl.client import ClientOptions, ClientStats, MonitoringClient, RetryPolicy
from etl.client.api import ROUTES
from etl.client.auth import PROBE_PATH, SIGN_IN_PATH, SignIn, session_cookie, sign_in_request
from etl.client.classify import RETRYABLE_STATUSES, is_html
from etl.client.models import Parameter, param_kind, record_id, type_shape
from etl.client.series import decode_json
from etl.config import ExtractConfig
from etl.errors import AuthError, ConfigError, EtlError, InvalidResponse, RequestRejected, ServerError
from etl.model import ParamKind, Series
from etl.support import redact
from etl.timeutil import DAY_MS, iso, now_ms, to_ms

BASE_PATH = "/sem-restservices"  # the base path of public deployments
SIGN_IN_WAYS: tuple[SignIn, ...] = get_args(SignIn)
MISSING_OBJECT = 2_147_483_646  # an object id no instance has: its 404 shows the error body
SAMPLE_OBJECTS = 3
SAMPLE_PARAMS = 3
SEARCH_PAGE = 1000
OIDS_PER_SEARCH = 200
COUNT_PAGES = 10  # search pages a wide fleet's parameters may be counted with, at most
LARGE_COUNTS = (100_000, 10_000, 1_000)  # asked in turn while the server refuses a count as too large
RECENT = 14 * DAY_MS  # where data is looked for first (averaged, so one small answer)
LONG_SPAN = 400 * DAY_MS  # an averaged span long enough to hold more buckets than a raw day has points
PROBE_RETRY = RetryPolicy(
    attempts=3, backoff_initial=0.2, backoff_max=2.0, deadline=30.0, retry_after_max=10.0
)
OPTIONS = ClientOptions(timeout=httpx.Timeout(60.0, connect=10.0))  # `etl init`'s, before any config
DEFAULT_MAX_POINTS: int = ExtractConfig.model_fields["max_points"].default
# What a server's choice of answer raises: a body that is not as expected, a request it refuses. A probe that
# meets one notes what it saw and what etl does instead, and goes on.
UNREADABLE = (InvalidResponse, RequestRejected)
_ISO = re.compile(r"\d{4}-\d\d-\d\d([T ])\d\d:\d\d(:\d\d)?(\.\d+)?(Z|z|[+-]\d\d:?\d\d)?")


@dataclass
class Findings:
    """What a probe learned. `as_dict` gives the keys `etl init --json` prints, in this order."""

    base_url: str
    sign_in: SignIn
    base_path_added: bool = False  # the URL given lacked the base path
    sign_in_refused: list[str] = field(default_factory=list)  # ways the server refused
    objects: int = 0
    parameters: dict[str, int] = field(default_factory=lambda: {k.value: 0 for k in ParamKind})
    parameters_counted_objects: int = 0  # objects whose parameters the counts cover
    # How the sample's records write their type: "text", "object" ({id, name}), "object without a name",
    # "number", joined by " and " when they differ; None: no record names one (or none was listed).
    type_shape: str | None = None
    search_agrees_with_lists: bool | None = None
    search_envelope: str | None = None  # how a page of the search came: "array", or the key it was under
    count_cap: int | None = None  # the silent cap on points per answer; None: none found
    count_cap_series: str | None = None  # the series whose answers showed it
    count_default: int | None = None  # points of an answer asked without a count; None: not below the others
    count_checked_up_to: int = 0  # the longest answer seen: no cap below this many points
    count_refused_over: int | None = None  # a count the server refused as too large (400)
    sample_parameter: int | None = None
    sample_day: str | None = None
    stamp_format: str | None = None
    latency_ms: float | None = None
    suggested_concurrency: int = 4
    session_end: str | None = None  # how a call without a live session is answered
    sessions_ended: int = 0  # sessions the server ended while the probe ran (each signed in again)
    error_body: str | None = None  # json, html, text, empty
    requests_made: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def base_candidates(url: str) -> list[str]:
    """The base URLs to try, in order: as given, with the base path added, and the host's base path."""
    url = url.rstrip("/")
    parts = urlsplit(url)
    found = [url]
    if not parts.path.rstrip("/").endswith(BASE_PATH):
        found.append(url + BASE_PATH)
    root = f"{parts.scheme}://{parts.netloc}{BASE_PATH}"
    if root not in found:
        found.append(root)
    return found


def suggest_concurrency(latency_ms: float | None) -> int:
    """Requests in flight that hide a round trip of `latency_ms` behind the few milliseconds etl spends on
    each answer (decoding, writing), bounded to stay polite: 4 on a local network, 16 at 40 ms, 32 at most."""
    if latency_ms is None:
        return 4
    return max(4, min(32, round(latency_ms / 2.5)))


def session_end_of(response: httpx.Response) -> str:
    """How an answer to a call without a live session reads, in the emulator's words (docs/emulator.md)."""
    status = response.status_code
    if 300 <= status < 400:
        where = response.headers.get("location", "").lower()
        return f"{status}-login" if "login" in where else f"{status}-home"
    if status == 200:
        return "html-login" if is_html(response.content) else "none"
    return str(status)


def error_body_of(response: httpx.Response) -> str:
    body = response.content
    if not body.strip():
        return "empty"
    if is_html(body):
        return "html"
    try:
        decode_json(body)
    except EtlError:
        return "text"
    return "json"


def stamp_pattern(stamp: Any) -> str:
    """A stamp's format, digits replaced: `YYYY-MM-DDThh:mm:ss.sssZ` is the document's."""
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return "epoch milliseconds"
    text = str(stamp)
    match = _ISO.fullmatch(text)
    if not match:
        return f"unknown ({text[:30]!r})"
    separator, seconds, fraction, offset = match.groups()
    pattern = f"YYYY-MM-DD{separator}hh:mm" + (":ss" if seconds else "")
    pattern += "." + "s" * (len(fraction) - 1) if fraction else ""
    if offset is None:
        return pattern + " (no offset)"
    return pattern + ("Z" if offset in ("Z", "z") else offset)


def stamp_ms(stamp: Any) -> int | None:
    """Epoch ms of a stamp as a server may send it (ISO with or without an offset: UTC then), or None."""
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return int(stamp)
    try:
        return to_ms(str(stamp))
    except ValueError:
        pass
    try:
        return to_ms(str(stamp) + "Z")
    except ValueError:
        return None


@dataclass
class _Answer:
    items: int
    stamps: list[Any]  # as sent

    def last_ms(self) -> int | None:
        return stamp_ms(self.stamps[-1]) if self.stamps else None


class Prober:
    """One probe of an instance. `async with Prober(...) as p: findings = await p.run()`; afterwards
    `p.client` is a MonitoringClient signed in where the probe found the service, whose requests count in
    `p.requests`.

    Every request goes through a client as those of `etl run` do (the session's send and retry, the
    transport and its errors), with the probe's retry policy and a few in flight: the answers it reads as
    they are (sign-in, the error body, a call without a session) through `Session.answer`. The client's
    stats count them; `ClientOptions.on_answer` times them."""

    def __init__(self, base_url: str, username: str, password: str, options: ClientOptions = OPTIONS) -> None:
        """`options`: how to talk to the server (its `sign_in` is tried first); the probe's own retry
        policy and concurrency replace the options'."""
        redact.register(password)
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._password = password
        self.options = replace(options, retry=PROBE_RETRY, max_in_flight=4, on_answer=self._answered)
        self.stats = ClientStats()
        self.get_ms: list[float] = []  # each GET's time to its whole answer
        self._client = self._client_at(self.base_url, options.sign_in)
        self.sample_params: list[Parameter] = []
        self._count = LARGE_COUNTS[0]  # the count sent for "as many as you give"
        self.refused: int | None = None  # a count the server refused as too large

    async def __aenter__(self) -> Prober:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def requests(self) -> int:
        return self.stats.requests

    @property
    def client(self) -> MonitoringClient:
        """The client, at the base URL and with the sign-in found (once `run` or `sign_in` has)."""
        return self._client

    def _client_at(self, base_url: str, sign_in: SignIn) -> MonitoringClient:
        options = replace(self.options, sign_in=sign_in)
        return MonitoringClient(base_url, self.username, self._password, options=options, stats=self.stats)

    def _answered(self, request: httpx.Request, seconds: float) -> None:
        if request.method == "GET":
            self.get_ms.append(seconds * 1000)

    # -- the whole probe ---------------------------------------------------------------------------

    async def run(self) -> Findings:
        found = await self.sign_in()
        await self.fleet(found)
        if found.objects:
            try:
                await self.counts(found)
            except UNREADABLE as exc:  # the rest of the probe still says something
                found.notes.append(
                    f"count not measured ({exc}): the config keeps extract.max_points "
                    f"{DEFAULT_MAX_POINTS}, and runs continue any answer that may have been cut"
                )
        self.finish(found)
        return found

    def finish(self, found: Findings) -> None:
        """The figures taken over the whole probe: latency, sessions ended, requests."""
        if self.get_ms:
            found.latency_ms = round(statistics.median(self.get_ms), 1)
        found.suggested_concurrency = suggest_concurrency(found.latency_ms)
        found.sessions_ended = self.stats.relogins
        if found.sessions_ended:
            found.notes.append(
                f"the server ended {found.sessions_ended} session(s) during the probe, answered as "
                f"{found.session_end}: etl signs in again by itself"
            )
        found.requests_made = self.requests

    # -- base URL and sign-in ---------------------------------------------------------------------

    async def sign_in(self) -> Findings:
        """Find where /auth/login lives and which way it takes the credentials; move the client there."""
        prefer = self.options.sign_in
        ways = [prefer, *(w for w in SIGN_IN_WAYS if w != prefer)]
        tried: list[str] = []
        for base in base_candidates(self.base_url):
            refused: list[str] = []
            for way in ways:
                request = sign_in_request(base, self.username, self._password, way)
                response = await self._client.session.answer(request)
                status = response.status_code
                cookie = session_cookie(response) if status == 200 else None
                if cookie is not None:
                    found = Findings(
                        base, way, base_path_added=base != self.base_url, sign_in_refused=refused
                    )
                    await self._open(found, cookie)
                    return found
                if status in RETRYABLE_STATUSES:
                    raise ServerError(f"sign-in at {redact.redact(base)}: HTTP {status}", status)
                if status not in (400, 401, 403):
                    break  # no sign-in here: another base path, not another way
                refused.append(way)
            if refused:
                raise AuthError(
                    f"sign-in refused for user {self.username!r} at {redact.redact(base)} "
                    + (
                        "both as query parameters and as a form body"
                        if len(refused) == 2
                        else f"({refused[0]})"
                    )
                    + ": check the username and password"
                )
            where = response.headers.get("location", "") if 300 <= status < 400 else ""
            tried.append(
                f"{redact.redact(base)}{SIGN_IN_PATH} (HTTP {status}"
                + (f" to {redact.redact(where)}" if where else "")
                + ")"
            )
        raise ConfigError(
            f"no sign-in endpoint found: tried {', '.join(tried)}; give the base URL with the service's base "
            f"path, e.g. https://HOST{BASE_PATH}"
        )

    async def _open(self, found: Findings, cookie: str) -> None:
        """The client where the service was found; the error body (within the probe's own session) and a
        call without a session."""
        if (found.base_url, found.sign_in) != (self._client.session.base_url, self.options.sign_in):
            await self._client.aclose()
            self._client = self._client_at(found.base_url, found.sign_in)
        session = self._client.session
        missing = await session.answer(
            httpx.Request("GET", f"{found.base_url}/db/object/{MISSING_OBJECT}", headers={"Cookie": cookie})
        )
        if 400 <= missing.status_code < 600 and missing.status_code not in (401, 403):
            found.error_body = error_body_of(missing)
        bare = await session.answer(httpx.Request("GET", found.base_url + PROBE_PATH))
        found.session_end = session_end_of(bare)
        if found.session_end == "none":
            found.notes.append("the server answered a call without a session: the login seems not to matter")
        if found.session_end in ("401", "403") and found.error_body is None:
            found.error_body = error_body_of(bare)

    # -- objects, parameters, discovery ---------------------------------------------------------------

    async def fleet(self, found: Findings) -> None:
        client = self.client
        try:
            ids = sorted(o.id for o in await client.objects_short())
        except UNREADABLE as exc:
            found.notes.append(
                f"objects not counted ({exc}): runs list them with GET /db/object, which this probe does not"
            )
            return
        found.objects = len(ids)
        if not ids:
            found.notes.append(f"the login {self.username!r} sees no object: nothing to export")
            return
        sample = _spread(ids, SAMPLE_OBJECTS)
        listed: list[Parameter] = []
        for object_id in sample:  # one at a time: a probe is polite, and each answer is timed alone
            for fetch in (client.physical_params, client.calculated_params):
                try:
                    listed += await fetch(object_id)
                except UNREADABLE as exc:
                    found.notes.append(
                        f"parameters of object {object_id} not listed ({exc}): runs list parameters "
                        "this way too, and would stop there"
                    )
        self.sample_params = _sample_params(listed)
        kinds = Counter(p.kind for p in listed)
        found.parameters = {k.value: kinds[k] for k in ParamKind}
        shapes = sorted({shape for p in listed if (shape := type_shape(p.meta)) is not None})
        found.type_shape = " and ".join(shapes) or None
        found.parameters_counted_objects = len(sample)
        found.search_agrees_with_lists = await self._search_agrees(found, sample, listed)
        if len(ids) > len(sample) and found.search_agrees_with_lists:
            try:
                await self._count_by_search(found, ids)
            except (*UNREADABLE, ServerError) as exc:
                found.notes.append(f"parameters not counted over the whole fleet ({exc})")
        if found.parameters_counted_objects < found.objects:
            found.notes.append(
                f"parameters counted over {found.parameters_counted_objects} of {found.objects} objects"
            )

    async def _search_agrees(self, found: Findings, sample: list[int], listed: list[Parameter]) -> bool:
        """Does the paged search list the sample objects' parameters, of the same kinds, as their lists
        do? Whatever it answers, the probe goes on: a search that cannot be used is noted, and runs list
        parameters object by object."""
        want = {(p.id, p.kind) for p in listed}
        got: set[tuple[int, ParamKind]] = set()
        offset = 0
        try:
            for _ in range(COUNT_PAGES):
                page = await self.client.search_page(sample, limit=SEARCH_PAGE, offset=offset)
                found.search_envelope = page.envelope or "array"
                if not page.records:
                    break
                rows = [_searched(r, sample) for r in page.records]
                if None in rows:
                    return False
                got |= {row for row in rows if row is not None}
                offset += len(page.records)
                if got == want and len(page.records) < SEARCH_PAGE:
                    break  # a short page that completes the lists: no need to ask for an empty one
        except (*UNREADABLE, ServerError) as exc:
            found.notes.append(
                f"the parameter search cannot be used ({exc}): runs list parameters object by object "
                "(2 requests per object)"
            )
            return False
        return got == want

    async def _count_by_search(self, found: Findings, ids: list[int]) -> None:
        """Parameters by kind over the whole fleet, from the paged search, within a page budget."""
        kinds: Counter[ParamKind] = Counter()
        counted, pages = 0, 0
        for first in range(0, len(ids), OIDS_PER_SEARCH):
            chunk = ids[first : first + OIDS_PER_SEARCH]
            offset, these = 0, Counter[ParamKind]()
            while pages < COUNT_PAGES and (
                page := await self.client.search_params(chunk, limit=SEARCH_PAGE, offset=offset)
            ):
                pages += 1
                these.update(
                    kind for r in page if isinstance(r, dict) and (kind := param_kind(r)) is not None
                )
                offset += len(page)
            if pages >= COUNT_PAGES:
                break
            pages += 1  # the empty page
            kinds.update(these)
            counted += len(chunk)
        if counted:
            found.parameters = {k.value: kinds[k] for k in ParamKind}
            found.parameters_counted_objects = counted

    # -- count: the silent cap and the default --------------------------------------------------------

    async def _series(
        self, param: Parameter, series: Series, start: int, end: int, count: int | None
    ) -> _Answer:
        """One measurement answer, as sent. `count` 0: the largest count the server accepts."""
        path = f"{ROUTES[param.kind, series]}/{param.id}/{start}/{end}"
        while True:
            asked = self._count if count == 0 else count
            params = {} if asked is None else {"count": asked}
            try:
                body = await self.client.session.call("GET", path, params)
            except RequestRejected as exc:
                smaller = [c for c in LARGE_COUNTS if c < (asked or 0)]
                if count != 0 or exc.status != 400 or not smaller:
                    raise
                self._count = smaller[0]
                self.refused = asked
                continue
            points = body.get("points") if isinstance(body, dict) else None
            if points is None and isinstance(body, dict):
                points = body.get("candles")
            points = points if isinstance(points, list) else []
            return _Answer(len(points), [p.get("timestmp") for p in points if isinstance(p, dict)])

    async def counts(self, found: Findings) -> None:
        """The cap and the default of `count` on the densest raw day of a few sample parameters; when no raw
        day holds enough points to show a cap, on a long averaged span of the densest one."""
        samples = self.sample_params
        if not samples:
            found.notes.append("no analog or calculated parameter to measure count on")
            return
        day = None
        for param in samples:  # the first with data lately: its fullest day
            day = await self._fullest_day(param)
            if day is not None:
                break
        if day is None:
            found.notes.append("no data in the last 400 days of the sample parameters: count not measured")
            return
        end = day + DAY_MS - 1  # the server's bounds are inclusive
        answers = {p.id: await self._series(p, Series.RAW, day, end, 0) for p in samples}
        densest = max(samples, key=lambda p: answers[p.id].items)
        top = answers[densest.id]
        found.sample_parameter, found.sample_day = densest.id, iso(day)[:10]
        found.stamp_format = (
            " | ".join(
                sorted({stamp_pattern(s) for a in answers.values() for s in a.stamps[:3] + a.stamps[-1:]})
            )
            or None
        )
        cap = await self._cut(densest, Series.RAW, top, end)
        found.count_checked_up_to = top.items
        unasked = await self._series(densest, Series.RAW, day, end, None)
        if cap is None:
            longer = await self._series(densest, Series.AVERAGE, end - LONG_SPAN, end, 0)
            found.count_checked_up_to = max(top.items, longer.items)
            if longer.items > top.items:
                cap = await self._cut(densest, Series.AVERAGE, longer, end)
                if cap is not None:
                    found.count_cap_series = Series.AVERAGE.value
                if unasked.items >= top.items:  # the raw day said nothing of the default: the longer span may
                    unasked = await self._series(densest, Series.AVERAGE, end - LONG_SPAN, end, None)
                    top = longer
        else:
            found.count_cap_series = Series.RAW.value
        found.count_cap = cap
        if unasked.items < top.items:
            found.count_default = unasked.items
        found.count_refused_over = self.refused
        if self.refused:
            found.notes.append(
                f"the server refuses count={self.refused} (HTTP 400); it accepts {self._count}"
            )

    async def _fullest_day(self, param: Parameter) -> int | None:
        """The UTC day with the most half-hour buckets of data lately (today excluded: it is not over)."""
        today = now_ms() // DAY_MS * DAY_MS
        for span in (RECENT, LONG_SPAN):
            buckets = await self._series(param, Series.AVERAGE, today - span, today - 1, 0)
            days = Counter(ms // DAY_MS * DAY_MS for s in buckets.stamps if (ms := stamp_ms(s)) is not None)
            if days:
                return max(days, key=lambda d: (days[d], d))
        return None

    async def _cut(self, param: Parameter, series: Series, answer: _Answer, end: int) -> int | None:
        """The answer's length if the server cut it there: the rest of its span holds more."""
        last = answer.last_ms()
        if not answer.items or last is None or last >= end or answer.items >= self._count:
            return None
        rest = await self._series(param, series, last + 1, end, 0)
        return answer.items if rest.items else None


def _searched(record: Any, sample: list[int]) -> tuple[int, ParamKind] | None:
    """A search record's id and kind, if it names them and one of the sample objects; else None."""
    if not isinstance(record, dict) or record.get("objectId") not in sample:
        return None
    kind = param_kind(record)
    try:
        return None if kind is None else (record_id(record.get("id")), kind)
    except ValueError:
        return None


def _spread(ids: list[int], n: int) -> list[int]:
    """Up to n ids spread over the list: the first, the last, and between."""
    if len(ids) <= n:
        return list(ids)
    return sorted({ids[round(i * (len(ids) - 1) / (n - 1))] for i in range(n)})


def _sample_params(listed: list[Parameter]) -> list[Parameter]:
    """Up to SAMPLE_PARAMS parameters to measure `count` on: analog physical ones of different objects
    first (signal parameters take no count), then calculated ones."""
    chosen: list[Parameter] = []
    for kind in (ParamKind.PHYSICAL, ParamKind.CALCULATED):
        seen_objects = {p.object_id for p in chosen}
        for p in listed:
            if len(chosen) < SAMPLE_PARAMS and p.kind == kind and p.object_id not in seen_objects:
                chosen.append(p)
                seen_objects.add(p.object_id)
    for p in listed:  # a small fleet: fill from any object
        if len(chosen) < SAMPLE_PARAMS and p.kind != ParamKind.SIGNAL and p.id not in {c.id for c in chosen}:
            chosen.append(p)
    return chosen


async def probe(base_url: str, username: str, password: str, options: ClientOptions = OPTIONS) -> Findings:
    """Probe an instance: see the module's docstring."""
    async with Prober(base_url, username, password, options) as prober:
        return await prober.run()
