"""`etl api`: one command per kind of record, printed as a table or JSON."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from etl.cli.params import SERIES_CHOICE, connection_option, open_client, window_options
from etl.cli.render import echo_json, echo_record, echo_table, plain, series_rows

if TYPE_CHECKING:
    from etl.client import MonitoringClient


@click.group()
def api() -> None:
    """Explore the platform: one command per kind of record (connection: --config or ETL_* env)."""


async def _call(config_path: str | None, fetch: Callable[..., Awaitable], arguments: dict) -> Any:
    async with open_client(config_path) as client:
        return await fetch(client, **arguments)


def _api_command(
    name: str,
    fetch: Callable[..., Awaitable],
    *params: Callable,
    columns: list[str] | None = None,
    help: str = "",
) -> None:
    """Register `etl api NAME`: connect, `await fetch(client, **arguments)`, print a table or JSON."""

    def command(config_path: str | None, as_json: bool, **arguments: Any) -> None:
        result = asyncio.run(_call(config_path, fetch, arguments))
        if as_json:
            echo_json(result)
        elif isinstance(result, list):
            echo_table([plain(r) for r in result], columns)
        else:
            echo_record(plain(result))

    for decorate in reversed(params):
        command = decorate(command)
    command = click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")(command)
    api.command(name, help=help)(connection_option(command))


async def _params(c: MonitoringClient, object_id: int) -> list:
    return [*await c.physical_params(object_id), *await c.calculated_params(object_id)]


async def _series(c: MonitoringClient, param_id: int, start: int, end: int, kind: str) -> list[dict]:
    from etl.client.lookup import find_param
    from etl.model import Series

    param = await find_param(c, param_id)
    return series_rows(await c.series(param.id, param.kind, Series(kind), start, end))


def _confirm(action: str, yes: bool) -> None:
    if not yes:
        click.confirm(f"This acts on real equipment: {action}. Go ahead?", abort=True)


async def _set_value(c: MonitoringClient, param_id: int, value: float, yes: bool) -> Any:
    _confirm(f"set parameter {param_id} to {value}", yes)
    return await c.set_value(param_id, value) or {"ok": True}


async def _run_command(c: MonitoringClient, device_id: int, command_id: int, data: str, yes: bool) -> Any:
    _confirm(f"run command {command_id} on device {device_id} with data {data!r}", yes)
    return await c.run_command(device_id, command_id, data) or {"ok": True}


_id = click.argument
_yes = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
_REFS = {"zones": "zones", "classifiers": "classifiers", "room-types": "room_types", "rooms": "rooms"}

_api_command(
    "objects",
    lambda c: c.objects(),
    columns=["id", "shortname", "fullname", "timezone", "address"],
    help="Objects visible to the login.",
)
_api_command(
    "object", lambda c, object_id: c.object(object_id), _id("object_id", type=int), help="One object."
)
_api_command(
    "units", lambda c, object_id: c.units(object_id), _id("object_id", type=int), help="Devices of an object."
)
_api_command(
    "params", _params, _id("object_id", type=int), help="Physical and calculated parameters of an object."
)
_api_command(
    "series",
    _series,
    _id("param_id", type=int),
    window_options(required=True, what="Read", end_note="the platform includes it"),
    click.option("--kind", type=SERIES_CHOICE, default="raw", show_default=True, help="Which series."),
    help="A series of one parameter of any kind (raw windows at most 24 h; 'etl pull' takes longer ones).",
)
_api_command(
    "status",
    lambda c, param_id: c.param_status(param_id),
    _id("param_id", type=int),
    help="Current status of a parameter.",
)
_api_command(
    "refs",
    lambda c, which: getattr(c, _REFS[which])(),
    _id("which", type=click.Choice(list(_REFS))),
    help="Reference lookups.",
)
_api_command(
    "commands",
    lambda c, device_id: c.ext_commands(device_id),
    _id("device_id", type=int),
    columns=["id", "name", "description", "cmd", "data"],
    help="External commands of a device.",
)
_api_command(
    "set-value",
    _set_value,
    _id("param_id", type=int),
    _id("value", type=float),
    _yes,
    help="Set a physical parameter's value (acts on equipment).",
)
_api_command(
    "run-command",
    _run_command,
    _id("device_id", type=int),
    _id("command_id", type=int),
    _id("data"),
    _yes,
    help="Run an external command on a device (acts on equipment).",
)
