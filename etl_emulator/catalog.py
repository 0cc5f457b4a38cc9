"""Handlers of the record endpoints: objects, units, parameter lists and search, external commands,
reference lookups. Nothing of an object the signed-in account does not see is ever returned."""

from __future__ import annotations

from typing import Any

import orjson

from etl_emulator import records
from etl_emulator.answers import Record, bad, envelope, not_found
from etl_emulator.dataset import DEVICES_PER_OBJECT, Dataset, Param
from etl_emulator.faults import FaultPlan
from etl_emulator.hostile import odd_objects, odd_params
from etl_emulator.routing import Call
from etl_emulator.state import Clock


def visible_object(ds: Dataset, call: Call, object_id: int) -> int:
    if object_id not in ds.object_ids or not call.user.sees(object_id):
        raise not_found(f"object {object_id}")
    return object_id


def visible_param(ds: Dataset, call: Call, param_id: int) -> Param:
    p = ds.param(param_id)
    if p is None or not call.user.sees(p.object_id):
        raise not_found(f"parameter {param_id}")
    return p


class Catalog:
    """The record endpoints over one dataset; keeps the external command runs."""

    def __init__(self, dataset: Dataset, clock: Clock, plan: FaultPlan | None = None) -> None:
        self.dataset = dataset
        self.clock = clock
        self.plan = plan or FaultPlan()
        self.runs: list[Record] = []

    def _params_body(self, found: list[Record]) -> bytes:
        kinds = self.plan.faults.odd_records
        return odd_params(kinds, found) if kinds else orjson.dumps(found)

    def _objects(self, call: Call) -> list[int]:
        return [o for o in self.dataset.object_ids if call.user.sees(o)]

    def _object(self, call: Call) -> int:
        return visible_object(self.dataset, call, call.args[0])

    def objects_short(self, call: Call) -> bytes:
        return orjson.dumps([records.object_short(o) for o in self._objects(call)])

    def objects(self, call: Call) -> bytes:
        states = set(call.integers("state"))
        found = [
            records.object_full(self.dataset, o, self.clock.now())
            for o in self._objects(call)
            if not states or records.object_state(self.dataset, o) in states
        ]
        kinds = self.plan.faults.odd_records
        return odd_objects(kinds, found) if kinds else orjson.dumps(found)

    def object(self, call: Call) -> bytes:
        return orjson.dumps(records.object_by_id(self.dataset, self._object(call), self.clock.now()))

    def units(self, call: Call) -> bytes:
        return orjson.dumps(records.units(self._object(call)))

    def _ids(self, object_ids: list[int], *, physical: bool, calculated: bool) -> list[int]:
        ds = self.dataset
        return sorted(
            pid
            for o in object_ids
            for pid in (ds.physical_ids(o) if physical else []) + (ds.calc_ids(o) if calculated else [])
        )

    def _record(self, pid: int) -> dict[str, Any]:
        """A parameter's full record, its type and signal marked as the server chose (Faults)."""
        f = self.plan.faults
        return records.marked(
            records.param_record(self.dataset, pid), f.type_field, f.signal_marker, f.type_shape
        )

    def _records(self, object_ids: list[int], *, physical: bool, calculated: bool) -> list[Record]:
        return [self._record(pid) for pid in self._ids(object_ids, physical=physical, calculated=calculated)]

    def object_params(self, call: Call, *, physical: bool) -> bytes:
        found = self._records([self._object(call)], physical=physical, calculated=not physical)
        tags = set(call.strings("tag"))
        for name in ("ctrability", "locked"):
            wanted = call.flag(name)
            if wanted is not None:
                found = [r for r in found if r.get(name, False) == wanted]
        if tags:
            found = [r for r in found if tags & set(r["tags"])]
        return self._params_body(found)

    def all_object_params(self, call: Call) -> bytes:
        return self._params_body(
            self._records([self._object(call)], physical=True, calculated=bool(call.flag("calc")))
        )

    def param_list(self, call: Call, *, physical: bool, short: bool) -> bytes:
        object_id = call.integer("objectId")
        objects = [o for o in self._objects(call) if object_id is None or o == object_id]
        found = self._records(objects, physical=physical, calculated=not physical)
        filters = {
            "controllerId": call.integers("controllerId") + call.integers("droneID"),
            "deviceClassifierId": call.integers("deviceClassified"),
            "roomId": call.integers("roomID"),
        }
        for key, wanted in filters.items():
            if wanted:
                found = [r for r in found if r.get(key) in wanted]
        tags = set(call.strings("tags"))
        if tags:
            found = [r for r in found if tags & set(r["tags"])]
        return self._params_body([records.param_short(r) for r in found] if short else found)

    def search_params(self, call: Call) -> bytes:
        limit, offset = call.integer("limit", 100), call.integer("offset", 0)
        if limit < 0 or offset < 0:
            raise bad("limit and offset must not be negative")
        oids = set(call.integers("oid"))
        objects = [o for o in self._objects(call) if not oids or o in oids]
        # records are made for the page only: a page costs the same on a fleet of 40,000 parameters
        ids = self._ids(objects, physical=True, calculated=True)
        found = [self._record(pid) for pid in ids[offset : offset + limit]]
        kinds = self.plan.faults.odd_records
        # Names edited as in the lists; no extra records (the search pages by offset).
        body = odd_params(kinds, found, extras=False) if kinds else orjson.dumps(found)
        return envelope(self.plan.faults.search_envelope, body, len(found), len(ids), limit, offset)

    def _device(self, call: Call, device_id: int) -> int:
        object_id, d = divmod(device_id, 100)
        if (
            object_id not in self.dataset.object_ids
            or not 1 <= d <= DEVICES_PER_OBJECT
            or not call.user.sees(object_id)
        ):
            raise not_found(f"device {device_id}")
        return device_id

    def ext_commands(self, call: Call) -> bytes:
        device_id = call.integer("deviceId")
        if device_id is None:
            raise bad("deviceId is required")
        return orjson.dumps(records.ext_commands(self._device(call, device_id)))

    def run_command(self, call: Call) -> bytes:
        device_id = self._device(call, call.args[0])
        call.user.require_control()
        command_id = call.integer("extCommandId")
        if command_id is None or call.one("commandData") is None:
            raise bad("extCommandId and commandData are required")
        if command_id not in {c["id"] for c in records.ext_commands(device_id)}:
            raise not_found(f"command {command_id} of device {device_id}")
        run = {
            "id": len(self.runs) + 1,
            "deviceId": device_id,
            "extCommandId": command_id,
            "commandData": call.one("commandData"),
            "login": call.user.login,
            "ts": self.clock.now(),
        }
        self.runs.append(run)
        return orjson.dumps({"id": run["id"], "status": "accepted"})

    def rooms(self, call: Call) -> bytes:
        object_id, location = call.integer("objectId"), call.integer("sensorLocationId")
        return orjson.dumps(
            [
                room
                for o in self._objects(call)
                if object_id is None or o == object_id
                for room in records.rooms(o)
                if location is None or room["sensorLocationId"] == location
            ]
        )
