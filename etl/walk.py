"""Discover what to export: objects visible to the login, then their selected parameters."""

from __future__ import annotations

import asyncio
import zlib

from etl.client import MonitoringClient
from etl.client.models import ObjectFull, Parameter
from etl.config import SelectConfig
from etl.errors import ConfigError


def in_shard(param_id: int, shard: tuple[int, int] | None) -> bool:
    """Stable across runs and machines (crc32, not Python's salted hash)."""
    if shard is None:
        return True
    index, count = shard
    return zlib.crc32(str(param_id).encode()) % count == index


async def discover(client: MonitoringClient, select: SelectConfig) -> tuple[list[ObjectFull], list[Parameter]]:
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
    wanted = select.parameters
    lists = []
    if {"physical", "signal"} & set(wanted.kinds):
        lists.append(client.physical_params)
    if "calculated" in wanted.kinds:
        lists.append(client.calculated_params)
    found = await asyncio.gather(*(fetch(o.id) for o in objects for fetch in lists))
    params = []
    for batch in found:
        for p in batch:
            if p.kind not in wanted.kinds or p.id in wanted.exclude_ids:
                continue
            if wanted.ids is not None and p.id not in wanted.ids:
                continue
            if wanted.tags is not None and not set(wanted.tags) & set(p.meta.get("tags") or []):
                continue
            params.append(p)
    return objects, sorted(set(params), key=lambda p: p.id)
