"""`etl api`: one command per kind of record, printed as a table or JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from etl.cli.params import SERIES_CHOICE, connection_option, env_connection, window_options
from etl.cli.render import echo_json, echo_record, echo_table, plain
from etl.config import load_config


@click.group()
def api() -> None:
    """Explore the platform: one command per kind of record (connection: --config or ETL_* env)."""


def _client_from(config_path: str | None):
    from etl.client import SyncMonitoringClient
    from etl.pipeline import make_client

    if config_path:
        return SyncMonitoringClient(client=make_client(load_config(config_path)))
    return SyncMonitoringClient(*env_connection())


def _api_command(name: str, fetch: Callable, *params: Callable, columns: list[str] | None = None,
                 help: str = "") -> None:
    """Register `etl api NAME`: connect, `fetch(client, **arguments)`, print a table or JSON."""

    def command(config_path: str | None, as_json: bool, **kwargs: Any) -> None:
        with _client_from(config_path) as client:
            result = fetch(client, **kwargs)
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


def _series_rows(client, param_id: int, start: int, end: int, kind: str, param_list: str) -> list[dict]:
    from etl.client.models import Candles, Parameter
    from etl.timeutil import iso

    source = "calculated" if param_list == "calculated" else "physical"
    meta = {"type": "signal"} if param_list == "signal" else {}
    data = client.series(Parameter(param_id, source, 0, meta), kind, start, end)
    if isinstance(data, Candles):
        return [
            {"ts": iso(int(t)), "open": o, "high": h, "low": lo, "close": c}
            for t, o, h, lo, c in zip(data.ts, data.open, data.high, data.low, data.close, strict=True)
        ]
    return [{"ts": iso(int(t)), "value": float(v)} for t, v in zip(data.ts, data.value, strict=True)]


def _confirm(action: str, yes: bool) -> None:
    if not yes:
        click.confirm(f"This acts on real equipment: {action}. Go ahead?", abort=True)


def _set_value(c, param_id: int, value: float, yes: bool):
    _confirm(f"set parameter {param_id} to {value}", yes)
    return c.set_value(param_id, value) or {"ok": True}


def _run_command(c, device_id: int, command_id: int, data: str, yes: bool):
    _confirm(f"run command {command_id} on device {device_id} with data {data!r}", yes)
    return c.run_command(device_id, command_id, data) or {"ok": True}


_id = click.argument
_yes = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
_REFS = {"zones": "zones", "classifiers": "classifiers", "room-types": "room_types", "rooms": "rooms"}

_api_command("objects", lambda c: c.objects(), columns=["id", "shortname", "fullname", "timezone", "address"],
             help="Objects visible to the login.")
_api_command("object", lambda c, object_id: c.object(object_id), _id("object_id", type=int), help="One object.")
_api_command("units", lambda c, object_id: c.units(object_id), _id("object_id", type=int),
             help="Devices of an object.")
_api_command("params", lambda c, object_id: c.physical_params(object_id) + c.calculated_params(object_id),
             _id("object_id", type=int), help="Physical and calculated parameters of an object.")
_api_command(
    "series", _series_rows, _id("param_id", type=int), window_options(required=True, what="Read", end_note="the platform includes it"),
    click.option("--kind", type=SERIES_CHOICE, default="raw", show_default=True, help="Which series."),
    click.option("--list", "param_list", type=click.Choice(["physical", "calculated", "signal"]),
                 default="physical", help="Which list the parameter comes from."),
    help="A series of one parameter (raw windows at most 24 h; use 'etl run' for more).",
)
_api_command("status", lambda c, param_id: c.param_status(param_id), _id("param_id", type=int),
             help="Current status of a parameter.")
_api_command("refs", lambda c, which: getattr(c, _REFS[which])(), _id("which", type=click.Choice(list(_REFS))),
             help="Reference lookups.")
_api_command("commands", lambda c, device_id: c.ext_commands(device_id), _id("device_id", type=int),
             columns=["id", "name", "description", "cmd", "data"], help="External commands of a device.")
_api_command("set-value", _set_value, _id("param_id", type=int), _id("value", type=float), _yes,
             help="Set a physical parameter's value (acts on equipment).")
_api_command("run-command", _run_command, _id("device_id", type=int), _id("command_id", type=int),
             _id("data"), _yes, help="Run an external command on a device (acts on equipment).")
