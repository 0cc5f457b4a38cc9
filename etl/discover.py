"""Discover what to export: the objects visible to the login, then their selected parameters.

Parameters are listed with the document's paged search (`/search/params`, many `oid`s a request, about
`2 + objects / OIDS_PER_SEARCH` requests for a fleet) when it can be trusted: its records must name
their object and kind, and for a sample object it must list exactly what the per-object physical and
calculated lists do. Otherwise, two lists per object (what the document guarantees).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from etl.client import MonitoringClient
from etl.client.models import ObjectFull, Parameter
from etl.config import SelectConfig
from etl.errors import ConfigError
from etl.model import Param, ParamKind

log = logging.getLogger(__name__)

OIDS_PER_SEARCH = 200  # keeps the query string near 2 kB
SEARCH_PAGE = 1000


@dataclass
class Discovery:
    objects: list[ObjectFull]
    parameters: list[Parameter]  # as listed, metadata included (for the dimension tables)

    def params(self) -> list[Param]:
        return [Param(p.id, int(p.object_id), ParamKind(p.kind)) for p in self.parameters]


def _kind_of(record: dict) -> str | None:
    kind = str(record.get("type", "")).lower()
    return None if not kind else "calculated" if kind == "calculated" else "physical"


async def _search(client: MonitoringClient, object_ids: list[int]) -> list[Parameter]:
    """Every page of every chunk of objects. A short page is not taken as the last one (a server may cap
    `limit` silently): the listing ends at an empty page."""
    async def chunk(ids: list[int]) -> list[Parameter]:
        found: list[Parameter] = []
        while True:
            page = await client.search_params(ids, limit=SEARCH_PAGE, offset=len(found))
            if not page:
                return found
            found.extend(Parameter(int(r["id"]), _kind_of(r), int(r["objectId"]), r) for r in page)

    chunks = [object_ids[i:i + OIDS_PER_SEARCH] for i in range(0, len(object_ids), OIDS_PER_SEARCH)]
    return [p for batch in await asyncio.gather(*(chunk(c) for c in chunks)) for p in batch]


async def _per_object(client: MonitoringClient, object_ids: list[int], kinds: set[str]) -> list[Parameter]:
    lists = []
    if {"physical", "signal"} & kinds:
        lists.append(client.physical_params)
    if "calculated" in kinds:
        lists.append(client.calculated_params)
    found = await asyncio.gather(*(fetch(o) for o in object_ids for fetch in lists))
    return [p for batch in found for p in batch]


async def _search_trusted(client: MonitoringClient, sample: int) -> bool:
    """Does the search list a sample object's parameters exactly as its lists do, naming object and kind?"""
    try:
        searched = await client.search_params([sample], limit=SEARCH_PAGE, offset=0)
    except Exception as exc:  # noqa: BLE001 - any refusal means: use the lists
        log.info("parameter search unavailable (%s): listing parameters object by object", exc)
        return False
    listed = await _per_object(client, [sample], {"physical", "calculated"})
    usable = all(isinstance(r, dict) and r.get("objectId") == sample and _kind_of(r) for r in searched)
    same = usable and {(int(r["id"]), _kind_of(r)) for r in searched} == {(p.id, p.source) for p in listed}
    if not same:
        log.info("parameter search answers differ from the parameter lists: listing object by object")
    return same


async def discover(client: MonitoringClient, select: SelectConfig) -> Discovery:
    objects = await client.objects(states=select.object_states)
    if select.objects != "all":
        visible = {o.id for o in objects}
        missing = sorted(set(select.objects) - visible)
        if missing:
            raise ConfigError(
                f"config error: select.objects: object(s) {', '.join(map(str, missing))} not visible to "
                f"login {client.session.username!r}" + (" in the selected states" if select.object_states else "")
            )
        objects = [o for o in objects if o.id in set(select.objects)]
    object_ids = sorted(o.id for o in objects)
    wanted = select.parameters
    kinds = {k.value for k in wanted.kinds}
    if len(object_ids) > 1 and await _search_trusted(client, object_ids[0]):
        found = await _search(client, object_ids)
    else:
        found = await _per_object(client, object_ids, kinds)
    return Discovery(objects, _select(found, wanted.kinds, wanted.ids, wanted.exclude_ids, wanted.tags))


def _select(found: Iterable[Parameter], kinds, ids, exclude_ids, tags) -> list[Parameter]:
    kinds, ids, exclude = {ParamKind(k).value for k in kinds}, None if ids is None else set(ids), set(exclude_ids)
    params: dict[int, Parameter] = {}
    for p in found:
        if p.kind not in kinds or p.id in exclude or (ids is not None and p.id not in ids):
            continue
        if tags is not None and not set(tags) & set(p.meta.get("tags") or []):
            continue
        params.setdefault(p.id, p)
    return sorted(params.values(), key=lambda p: p.id)
