"""A dimension table whose answers cannot be read, or are throttled to the end, fails alone: the other
tables are collected."""

from __future__ import annotations

import asyncio

import pytest

from etl.client.models import ExternalCommand
from etl.errors import InvalidResponse, Throttled
from etl.pipeline.dimensions import Rows, collect


class Client:
    """The calls dimensions.collect makes, one of them broken."""

    def __init__(self, broken: str, error: type[Exception] = InvalidResponse) -> None:
        self.broken, self.error = broken, error

    async def _answer(self, name: str, value):
        if name == self.broken:
            if self.error is Throttled:
                raise Throttled(f"GET /{name}: gave up after 8 attempt(s) in 1.0s: HTTP 429", 429)
            raise self.error(f"GET /{name}: answer nested deeper than the JSON parser reads")
        return value

    async def units(self, object_id: int):
        unit = {"id": 1, "deviceconnect": {"device": {"id": "abc"}}}  # a device id that is not one
        good = {"id": 2, "deviceconnect": {"device": {"id": object_id * 100 + 1}}}
        return await self._answer("units", [unit, good, "not a record"])

    async def ext_commands(self, device_id: int):
        return await self._answer("commands", [ExternalCommand(id=device_id, name="reboot")])

    async def zones(self):
        return await self._answer("zones", [{"id": 1, "name": "North"}])

    async def classifiers(self):
        return await self._answer("classifiers", [{"id": 1}])

    async def room_types(self):
        return await self._answer("room_types", [{"id": 1}])

    async def rooms(self):
        return await self._answer("rooms", [{"id": 1}])


def run(broken: str, error: type[Exception] = InvalidResponse) -> tuple[dict[str, Rows], list[str]]:
    client = Client(broken, error)
    return asyncio.run(collect(client, [1, 2], Rows("objects"), Rows("parameters")))  # type: ignore[arg-type]


def test_a_table_that_cannot_be_read_fails_alone():
    tables, failed = run("zones")
    assert set(tables) == {"objects", "units", "parameters", "commands", "classifiers", "room_types", "rooms"}
    assert failed == ["dimension table zones: GET /zones: answer nested deeper than the JSON parser reads"]
    assert tables["units"].count == 4 and tables["commands"].count == 2  # odd units and device ids skipped
    for rows in tables.values():
        rows.close()


def test_the_commands_need_the_units():
    tables, failed = run("units")
    assert "units" not in tables and "commands" not in tables and len(failed) == 2
    for rows in tables.values():
        rows.close()


@pytest.mark.parametrize("broken", ["units", "rooms"])
def test_a_table_throttled_to_the_end_fails_alone(broken):
    tables, failed = run(broken, Throttled)
    assert broken not in tables and "objects" in tables and "zones" in tables
    assert (
        failed[0] == f"dimension table {broken}: GET /{broken}: gave up after 8 attempt(s) in 1.0s: HTTP 429"
    )
    for rows in tables.values():
        rows.close()
