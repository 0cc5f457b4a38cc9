"""Snapshots of the reference data analysts join to series: objects, devices, parameters, lookups."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pyarrow as pa

from etl.client import MonitoringClient
from etl.client.models import ObjectFull, Parameter
from etl.sinks import FileFormat
from etl.storage import Storage

FOLDER = "dimensions"


def _column(values: list[Any]) -> pa.Array:
    present = {type(v) for v in values if v is not None}
    if present <= {int} or present <= {bool} or present <= {str}:
        return pa.array(values)
    if present <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    # Nested or mixed values: JSON text, which DuckDB's json functions read directly.
    return pa.array([None if v is None else orjson.dumps(v).decode() for v in values], pa.string())


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r))
    return pa.table({n: _column([r.get(n) for r in records]) for n in names}) if records else pa.table({})


async def collect(client: MonitoringClient, objects: list[ObjectFull], params: list[Parameter]) -> dict[str, list[dict]]:
    units_per_object = await asyncio.gather(*(client.units(o.id) for o in objects))
    units = [{"object_id": o.id, **u} for o, us in zip(objects, units_per_object, strict=True) for u in us]
    device_ids = sorted({
        int(u["deviceconnect"]["device"]["id"])
        for u in units
        if isinstance(u.get("deviceconnect"), dict) and isinstance(u["deviceconnect"].get("device"), dict)
    })
    zones, classifiers, room_types, rooms, *commands = await asyncio.gather(
        client.zones(), client.classifiers(), client.room_types(), client.rooms(),
        *(client.ext_commands(d) for d in device_ids),
    )
    return {
        "objects": [o.raw() for o in objects],
        "units": units,
        "parameters": [p.raw() for p in params],
        "zones": zones,
        "classifiers": classifiers,
        "room_types": room_types,
        "rooms": rooms,
        "commands": [c.raw() for batch in commands for c in batch],
    }


def write(storage: Storage, fmt: FileFormat, tables: dict[str, list[dict]]) -> list[str]:
    written = []
    for name, records in tables.items():
        rel = f"{FOLDER}/{name}{fmt.extension}"
        storage.write_atomic(rel, fmt.encode(records_table(records)))
        written.append(rel)
    return written
