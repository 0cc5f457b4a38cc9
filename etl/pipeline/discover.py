"""Discover what to export: the objects visible to the login, then their selected parameters.

Parameters are listed with the document's paged search (`/search/params`, many `oid`s a request, about
`2 + objects / OIDS_PER_SEARCH` requests for a fleet; a page is a bare array or an envelope such as
`{"total": N, "items": [...]}`, which the client reads) when it can be trusted: its records must name
their object and kind, and for a sample object it must list exactly what the per-object physical and
calculated lists do. Otherwise, two lists per object (what the document guarantees). The check and the
first pages of the search are asked at once: sign-in, objects, search, its empty last page are the
four round trips before the first series request. A fleet whose lists all fit in one round of requests
(two an object, at most the requests in flight) is listed object by object: three round trips.

With the fleet's catalog (etl/pipeline/catalog.py), a run lists the parameters of the objects that are new
or due only, the same way, and keeps the others' rows from the catalog, a row group at a time: the
result is the same (every selected parameter, in the plan's columns and the dimension table's rows),
and the catalog is written anew from it.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl.client import MonitoringClient
from etl.client.models import ObjectFull, Parameter, param_kind, record_id
from etl.config import ParameterSelect, SelectConfig
from etl.errors import ConfigError, InvalidResponse, StorageError
from etl.model import PARAM_KINDS, ParamKind, Params
from etl.pipeline.catalog import CatalogFigures, CatalogOptions, due, noted, selection_digest
from etl.pipeline.dimensions import Rows
from etl.state.catalog import KEYS, Kept, Listings
from etl.support import trace

log = logging.getLogger(__name__)

OIDS_PER_SEARCH = 200  # keeps the query string near 2 kB
SEARCH_PAGE = 1000
SEARCHES_AT_ONCE = 4
NO_CONTROLLER = (
    1  # sdirobjectstate id: no controller installed or configured on the object (the document's 3)
)

_List = Callable[[int], Awaitable[list[Parameter]]]  # an object's parameters of one list


@dataclass
class Discovery:
    """What a run exports, compactly: the metadata of objects and parameters is kept as Arrow rows (for
    the dimension tables), not as one Python object per record."""

    object_ids: list[int]
    objects: Rows
    parameters: Rows  # every selected parameter, as listed (or kept), plus list, kind and object_id
    params: Params
    catalog: CatalogFigures = field(default_factory=CatalogFigures)
    # Writes the fleet's catalog anew from this discovery: a run calls it once it knows the output is its
    # own to write (a run stopped before then leaves the catalog as it was).
    save_catalog: Callable[[], None] = field(default=lambda: None, repr=False)
    # Objects whose record says none of their parameters can send now: no controller installed or
    # configured (state 1, "new", in the document), or every controller offline.
    silent: list[int] = field(default_factory=list)

    def silent_params(self, params: Params) -> np.ndarray:
        """The ids of these parameters on silent objects."""
        return params.id[np.isin(params.object_id, np.array(self.silent, np.int64))]


class _Selection:
    """The parameters the config selects, taken a page at a time: compact columns for the plan, Arrow
    rows for the dimension table, nothing per record kept as a Python object."""

    def __init__(self, wanted: ParameterSelect) -> None:
        self.kinds = {ParamKind(k).value for k in wanted.kinds}
        self.ids = None if wanted.ids is None else set(wanted.ids)
        self.exclude = set(wanted.exclude_ids)
        self.tags = None if wanted.tags is None else set(wanted.tags)
        self.found = (array("q"), array("q"), array("b"))  # id, object_id, kind (position in PARAM_KINDS)
        # What the listings held of the ids and tags asked for, whatever the other filters: an id or tag
        # that no listing holds is a mistake to name, not an empty selection to export silently.
        self.ids_listed: set[int] = set()
        self.tags_listed: set[str] = set()
        self.kept = 0  # rows kept from the catalog: each was selected when listed
        self.seen = _Seen()
        self.rows = Rows("parameters")

    def take(self, page: list[Parameter]) -> None:
        if self.ids is not None:
            self.ids_listed.update(p.id for p in page if p.id in self.ids)
        if self.tags is not None:
            for p in page:
                self.tags_listed.update(self.tags.intersection(p.meta.get("tags") or ()))
        page = [
            p
            for p in page
            if p.kind in self.kinds
            and p.id not in self.exclude
            and (self.ids is None or p.id in self.ids)
            and (self.tags is None or self.tags & set(p.meta.get("tags") or []))
        ]
        fresh = self.seen.new(np.fromiter((p.id for p in page), np.int64, len(page)))
        page = [p for p, new in zip(page, fresh.tolist(), strict=True) if new]
        ids, objects, kinds = self.found
        ids.extend(p.id for p in page)
        for p in page:
            if p.object_id is None:  # discovery lists by object: the object is always known
                raise InvalidResponse(f"parameter {p.id} was listed without its object")
            objects.append(p.object_id)
        kinds.extend(PARAM_KINDS.index(p.kind) for p in page)
        self.rows.add([p.raw() for p in page])

    def check(self, username: str) -> None:
        """Names the ids and tags asked for that no listing of the selected objects holds."""
        kinds = "/".join(sorted(self.kinds))
        if self.ids is not None and (missing := sorted(self.ids - self.ids_listed)):
            raise ConfigError(
                f"config error: select.parameters.ids: parameter(s) {', '.join(map(str, missing))} not among "
                f"the {kinds} parameters of the selected objects visible to login {username!r}"
            )
        # One tag unused is a choice; none used, a mistake.
        if self.tags and not self.tags_listed and not self.kept:
            raise ConfigError(
                f"config error: select.parameters.tags: no {kinds} parameter of the selected objects has "
                f"any of the tags {', '.join(map(repr, sorted(self.tags)))}"
            )

    def params(self) -> Params:
        ids, objects, kinds = (np.array(column) for column in self.found)  # int64, int64, int8
        order = np.argsort(ids, kind="stable")
        return Params(ids[order], objects[order], kinds[order])

    def keep(self, batch: pa.RecordBatch, objects: np.ndarray) -> np.ndarray:
        """Take a row group of the catalog: its rows of `objects` (sorted ids: not listed this run) that no
        listing of this run holds. Returns the ids of the others not listed now (gone)."""
        ids = np.asarray(batch.column("_id").to_numpy(zero_copy_only=False), np.int64)
        owners = np.asarray(batch.column("_object").to_numpy(zero_copy_only=False), np.int64)
        listed = self.seen.contains(ids)
        kept = ~listed & np.isin(owners, objects)
        rows = pa.Table.from_batches([batch.filter(pa.array(kept))])
        self.seen.new(ids[kept])
        kinds = rows.column("_kind").to_numpy(zero_copy_only=False)
        for column, values in zip(self.found, (ids[kept], owners[kept], kinds), strict=True):
            column.frombytes(np.ascontiguousarray(values, column.typecode).tobytes())
        if self.ids is not None:
            self.ids_listed.update(i for i in ids[kept].tolist() if i in self.ids)
        self.kept += rows.num_rows
        self.rows.add_table(rows.drop_columns(list(KEYS)))
        return ids[~listed & ~kept]

    def catalog_pages(self) -> Iterator[pa.Table]:
        """The rows taken, page by page with the catalog's own columns: what the catalog is written from."""
        ids, objects = (np.frombuffer(column, np.int64) for column in self.found[:2])
        kinds = np.frombuffer(self.found[2], np.int8)
        at = 0
        for page in self.rows.tables():
            end = at + page.num_rows
            yield (
                page.append_column(KEYS[0], pa.array(ids[at:end]))
                .append_column(KEYS[1], pa.array(objects[at:end]))
                .append_column(KEYS[2], pa.array(kinds[at:end]))
            )
            at = end
        if at != len(ids):
            raise AssertionError(f"the catalog's rows ({at}) and the parameters taken ({len(ids)}) differ")


class _Seen:
    """Parameter ids taken so far, as a sorted array and a short array of the latest: a membership test
    per page without a Python int kept per parameter."""

    LATEST = 4096

    def __init__(self) -> None:
        self.sorted = np.empty(0, np.int64)
        self.latest = np.empty(0, np.int64)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Which of `ids` were seen."""
        found = np.zeros(len(ids), bool)
        for known in (self.sorted, self.latest):
            if len(known) and len(ids):
                at = np.minimum(np.searchsorted(known, ids), len(known) - 1)
                found |= known[at] == ids
        return found

    def new(self, ids: np.ndarray) -> np.ndarray:
        """Which of `ids` were not seen before (nor earlier in `ids`); they are seen now."""
        fresh = np.zeros(len(ids), bool)
        fresh[np.unique(ids, return_index=True)[1]] = True
        fresh &= ~self.contains(ids)
        self.latest = np.union1d(self.latest, ids[fresh])
        if len(self.latest) > self.LATEST:
            self.sorted, self.latest = np.union1d(self.sorted, self.latest), np.empty(0, np.int64)
        return fresh


def _chunks(object_ids: list[int]) -> list[list[int]]:
    return [object_ids[i : i + OIDS_PER_SEARCH] for i in range(0, len(object_ids), OIDS_PER_SEARCH)]


async def _search(
    client: MonitoringClient,
    chunks: list[list[int]],
    selection: _Selection,
    first_pages: Sequence[asyncio.Future[list[Any]]] | None = None,
) -> None:
    """Every page of every chunk of objects. A short page is not taken as the last one (a server may cap
    `limit` silently): the listing ends at an empty page. A chunk is listed object by object instead (the
    same parameter taken twice counts once) when its records do not all name their kind, when a page
    cannot be read, or when the server answers the next offset with the same page (it ignores `offset`:
    its pages would never end). `first_pages`: the first chunks' first pages, asked already."""
    unsearched: dict[str, list[int]] = {}  # why -> objects

    async def chunk(ids: list[int], first: asyncio.Future[list[Any]] | None) -> None:
        offset: int = 0
        head: Any = None
        while True:
            try:
                page = await (
                    first
                    if first is not None
                    else client.search_params(ids, limit=SEARCH_PAGE, offset=offset)
                )
            except InvalidResponse as exc:
                unsearched.setdefault(f"a page could not be read ({exc})", []).extend(ids)
                return
            if not page:
                return
            first = None
            if page[0] == head:
                unsearched.setdefault(f"offset {offset} answered the page before it again", []).extend(ids)
                return
            head = page[0]
            offset += len(page)
            typed = [(r, kind) for r in page if isinstance(r, dict) and (kind := param_kind(r)) is not None]
            if len(typed) < len(page):
                unsearched.setdefault("records without a type", []).extend(ids)
                return
            found = []
            for index, (r, kind) in enumerate(typed):
                try:
                    listed = Parameter.listed_as(kind)
                    found.append(Parameter(record_id(r.get("id")), listed, record_id(r.get("objectId")), r))
                except ValueError as exc:
                    client.skip(f"record #{offset - len(page) + index + 1} of GET /search/params", str(exc))
            selection.take(found)

    asked = list(first_pages or [])
    for at in range(0, len(chunks), SEARCHES_AT_ONCE):  # pages in flight: a bounded few
        group = chunks[at : at + SEARCHES_AT_ONCE]
        await asyncio.gather(
            *(chunk(c, asked[at + i] if at + i < len(asked) else None) for i, c in enumerate(group))
        )
    for why, ids in unsearched.items():
        log.info("parameter search: %s: listing %d object(s) one by one", why, len(ids))
    if unsearched:
        ids = sorted({o for objects in unsearched.values() for o in objects})
        await _per_object(client, ids, selection.kinds, selection)


def _lists(client: MonitoringClient, kinds: set[str]) -> list[_List]:
    """The per-object lists that hold parameters of these kinds (signals are among the physical ones)."""
    lists: list[_List] = []
    if {"physical", "signal"} & kinds:
        lists.append(client.physical_params)
    if "calculated" in kinds:
        lists.append(client.calculated_params)
    return lists


async def _per_object(
    client: MonitoringClient, object_ids: list[int], kinds: set[str], selection: _Selection | None = None
) -> list[Parameter]:
    lists = _lists(client, kinds)
    listed: list[Parameter] = []

    async def one(object_id: int, fetch: _List) -> None:
        page = await fetch(object_id)
        selection.take(page) if selection is not None else listed.extend(page)

    await asyncio.gather(*(one(o, fetch) for o in object_ids for fetch in lists))
    return listed


async def _search_trusted(client: MonitoringClient, sample: int) -> bool:
    """Does the search list a sample object's parameters exactly as its lists do, naming object and kind?
    The three answers are asked at once."""
    search = asyncio.ensure_future(client.search_params([sample], limit=SEARCH_PAGE, offset=0))
    try:
        listed = await _per_object(client, [sample], {"physical", "calculated"})
    except BaseException:
        search.cancel()
        await asyncio.gather(search, return_exceptions=True)
        raise
    try:
        searched = await search
    except Exception as exc:  # noqa: BLE001 - any refusal means: use the lists
        log.info("parameter search unavailable (%s): listing parameters object by object", exc)
        return False
    usable = all(
        isinstance(r, dict) and r.get("objectId") == sample and param_kind(r) and _usable_id(r.get("id"))
        for r in searched
    )
    same = usable and {(record_id(r["id"]), param_kind(r)) for r in searched} == {
        (p.id, p.kind) for p in listed
    }
    if not same:
        log.info("parameter search answers differ from the parameter lists: listing object by object")
    return same


def _usable_id(value: object) -> bool:
    try:
        record_id(value)
    except ValueError:
        return False
    return True


async def discover(
    client: MonitoringClient, select: SelectConfig, catalog: CatalogOptions | None = None
) -> Discovery:
    """The selected objects and parameters: every object's parameters listed, or with a `catalog`, those
    of the objects new or due, the others kept from it (and the catalog written anew, unless a dry run)."""
    with trace.current().span("etl.discovery") as span:
        requests = client.stats.requests
        found = await _discover(client, select, catalog)
        span.set(
            objects=len(found.object_ids),
            parameters=len(found.params),
            requests=client.stats.requests - requests,
        )
        return found


async def _discover(
    client: MonitoringClient, select: SelectConfig, catalog: CatalogOptions | None
) -> Discovery:
    records, selection = Rows("objects"), _Selection(select.parameters)
    found = Discovery([], records, selection.rows, Params.of([]))
    try:
        found.object_ids = await _objects(client, select, records, found.silent)
        if catalog is None:
            await _list(client, found.object_ids, selection)
        else:
            await _with_catalog(client, select, selection, catalog, found)
        selection.check(client.session.username)
    except BaseException:
        records.close()  # their spooled pages
        selection.rows.close()
        raise
    found.params = selection.params()
    return found


async def _list(client: MonitoringClient, object_ids: list[int], selection: _Selection) -> None:
    if len(_lists(client, selection.kinds)) * len(object_ids) > client.session.max_in_flight:
        await _search_or_list(client, object_ids, selection)
    elif object_ids:  # the lists in one round trip, where the search needs two (its check, its empty page)
        await _per_object(client, object_ids, selection.kinds, selection)


async def _with_catalog(
    client: MonitoringClient,
    select: SelectConfig,
    selection: _Selection,
    catalog: CatalogOptions,
    found: Discovery,
) -> None:
    """List the objects new or due, keep the others' parameters from the catalog; `found` gets the figures
    and what writes the catalog anew."""
    digest, now = selection_digest(select), catalog.now
    ids = np.array(found.object_ids, np.int64)
    figures = found.catalog = CatalogFigures(
        objects=len(ids), forced=catalog.full, now=now, refresh=catalog.refresh
    )
    with ExitStack() as held:
        # Read even when every object is to be listed: what the listings no longer show is named.
        kept: Kept | None = await asyncio.to_thread(held.enter_context, catalog.store.read(digest))
        listings = kept.listings if kept is not None else None
        listing = (
            due(ids, kept.listings, now, now - kept.written, catalog.refresh)
            if kept is not None and catalog.refresh and not catalog.full
            else np.ones(len(ids), bool)
        )
        figures.kept, figures.listed = kept is not None, int(listing.sum())
        await _list(client, ids[listing].tolist(), selection)
        if kept is not None:
            others = ids[~listing]
            figures.oldest = _oldest(kept.listings, others)
            gone = await asyncio.to_thread(_keep, kept, selection, others)
            figures.add_gone(gone)
            if gone:
                log.warning("%s", figures.gone_text())
    if catalog.save:
        new = noted(ids, listings, listing, now, catalog.refresh)

        def save() -> None:
            # The catalog saves requests, nothing else: one not written leaves the last one (the objects
            # listed now are listed again, what they held found again), and the run goes on.
            try:
                catalog.store.write(digest, now, new, selection.catalog_pages())
            except StorageError as exc:
                log.warning(
                    "the fleet's catalog is not written (%s): the next run lists these objects again", exc
                )

        found.save_catalog = save


def _keep(kept: Kept, selection: _Selection, objects: np.ndarray) -> list[int]:
    gone = [selection.keep(batch, objects) for batch in kept.batches()]
    return sorted(np.concatenate(gone).tolist()) if gone else []


def _oldest(listings: Listings, objects: np.ndarray) -> int | None:
    """The oldest listing of `objects` (sorted ids, all in `listings`), None for none."""
    if not len(objects):
        return None
    at = np.searchsorted(listings.object_id, objects)
    return int(listings.listed[at].min())


async def _search_or_list(client: MonitoringClient, object_ids: list[int], selection: _Selection) -> None:
    """The search when it can be trusted, else the lists. The first chunks' first pages are asked beside
    the check (a round trip fewer before the first series request); they are dropped if the check fails."""
    chunks = _chunks(object_ids)
    first = [
        asyncio.ensure_future(client.search_params(c, limit=SEARCH_PAGE, offset=0))
        for c in chunks[:SEARCHES_AT_ONCE]
    ]
    try:
        trusted = await _search_trusted(client, object_ids[0])
        if trusted:
            await _search(client, chunks, selection, first)
            return
    finally:
        for page in first:
            page.cancel()
        await asyncio.gather(*first, return_exceptions=True)
    await _per_object(client, object_ids, selection.kinds, selection)


def _silent(o: ObjectFull) -> bool:
    """Whether an object's record says none of its parameters can send now."""
    state = o.sdirobjectstate.get("id") if isinstance(o.sdirobjectstate, dict) else None
    total, offline = o.controllersTotalCount, o.controllersOfflineCount
    return state == NO_CONTROLLER or (bool(total) and offline is not None and offline >= (total or 0))


async def _objects(
    client: MonitoringClient, select: SelectConfig, records: Rows, silent: list[int]
) -> list[int]:
    """The selected objects' ids, sorted; their records go to `records` a page at a time; the silent
    ones' ids to `silent`."""
    wanted = None if select.objects == "all" else set(select.objects)
    # An array, not a list: an int kept from each page would pin the allocator's arenas that held the
    # page's records, and the listing's whole peak would stay for the run.
    object_ids = array("q")
    async for page in client.object_pages(states=select.object_states):
        page = [o for o in page if wanted is None or o.id in wanted]
        object_ids.extend(o.id for o in page)
        silent.extend(o.id for o in page if _silent(o))
        records.add([o.raw() for o in page])
    missing = sorted((wanted or set()) - set(object_ids))
    if missing:
        raise ConfigError(
            f"config error: select.objects: object(s) {', '.join(map(str, missing))} not visible to "
            f"login {client.session.username!r}" + (" in the selected states" if select.object_states else "")
        )
    return sorted(object_ids)
