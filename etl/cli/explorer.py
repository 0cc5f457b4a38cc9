"""`etl api`: one command per kind of record, printed as a table or JSON."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from etl.cli.params import connection_option, open_client, series_option, window_options
from etl.cli.render import echo_json, echo_record, echo_table, plain, series_rows
from etl.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from etl.client import MonitoringClient
    from etl.client.models import Parameter, ParamStatus

T = TypeVar("T")
# What `etl api NAME` calls: a client method with the command's arguments, awaited.
Fetch = Callable[..., Awaitable[object]]
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@click.group()
def api() -> None:
    """Explore the platform: one command per kind of record (connection: --config or ETL_* env)."""


async def _call(config_path: str | None, fetch: Fetch, arguments: dict[str, object]) -> object:
    async with open_client(config_path) as client:
        return await fetch(client, **arguments)


def not_visible(what: str) -> ConfigError:
    return ConfigError(f"{what} does not exist or is not visible to this login")


def _api_command(
    name: str,
    fetch: Fetch,
    *params: Decorator,
    columns: list[str] | None = None,
    missing: str = "",
    help: str = "",
) -> None:
    """Register `etl api NAME`: connect, `await fetch(client, **arguments)`, print a table or JSON.
    `missing` names what a 404 means, formatted with the arguments (e.g. "object {object_id}")."""

    def command(config_path: str | None, as_json: bool, **arguments: object) -> None:
        try:
            result = asyncio.run(_call(config_path, fetch, arguments))
        except NotFound:
            if not missing:
                raise
            raise not_visible(missing.format(**arguments)) from None
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


async def _params(c: MonitoringClient, object_id: int) -> list[Parameter]:
    params = [*await c.physical_params(object_id), *await c.calculated_params(object_id)]
    if not params and object_id not in {o.id for o in await c.objects_short()}:
        raise not_visible(f"object {object_id}")  # the lists answer an unknown object with nothing
    return params


async def _physical(c: MonitoringClient, param_id: int, action: str, call: Awaitable[T]) -> T:
    """A call only physical parameters take: a 404 for a calculated one says so."""
    try:
        return await call
    except NotFound:
        if any(p.id == param_id for p in await c.calculated_params()):
            raise ConfigError(
                f"{action} is for physical parameters; {param_id} is a calculated one"
            ) from None
        raise not_visible(f"parameter {param_id}") from None


async def _status(c: MonitoringClient, param_id: int) -> ParamStatus:
    return await _physical(c, param_id, "status", c.param_status(param_id))


async def _series(
    c: MonitoringClient, param_id: int, start: int, end: int, series: str
) -> list[dict[str, object]]:
    from etl.client.lookup import find_param
    from etl.model import Series

    param = await find_param(c, param_id)
    return series_rows(await c.series(param.id, param.kind, Series(series), start, end))


def _confirm(action: str, yes: bool) -> None:
    if not yes:
        click.confirm(f"This acts on real equipment: {action}. Go ahead?", abort=True)


async def _set_value(c: MonitoringClient, param_id: int, value: float, yes: bool) -> Any:
    _confirm(f"set parameter {param_id} to {value}", yes)
    return await _physical(c, param_id, "setting a value", c.set_value(param_id, value)) or {"ok": True}


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
    "object",
    lambda c, object_id: c.object(object_id),
    _id("object_id", type=int),
    missing="object {object_id}",
    help="One object.",
)
_api_command(
    "units",
    lambda c, object_id: c.units(object_id),
    _id("object_id", type=int),
    missing="object {object_id}",
    help="Devices of an object.",
)
_api_command(
    "params", _params, _id("object_id", type=int), help="Physical and calculated parameters of an object."
)
_api_command(
    "series",
    _series,
    _id("param_id", type=int),
    window_options(required=True, what="Read", end_note="the platform includes it"),
    series_option,
    help="A series of one parameter of any kind (raw windows at most 24 h; 'etl pull' takes longer ones).",
)
_api_command(
    "status",
    _status,
    _id("param_id", type=int),
    help="Current status of a physical parameter.",
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
    missing="device {device_id}",
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
    missing="device {device_id} or its command {command_id}",
    help="Run an external command on a device (acts on equipment).",
)
