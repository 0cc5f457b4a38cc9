"""A parameter from its bare id, for commands that take one (`etl pull`, `etl api series`)."""

from __future__ import annotations

from etl.client import MonitoringClient
from etl.errors import ConfigError
from etl.model import Param


async def find_param(client: MonitoringClient, param_id: int) -> Param:
    """The parameter with this id from the login's physical list, else its calculated list.

    Its kind then picks the route, exactly as in `etl run`. Why the lists, not trying the routes until
    one stops answering 404: the records carry the parameter's type, the only documented way to tell a
    signal parameter (raw from /db/signal) from another physical one. /db/measure answers for signal
    parameters too, so a fallback would never reach the signal route and would label them physical;
    and the document shows no error codes to rely on. The price: one list request for a physical
    parameter, two for a calculated one, whose answers grow with the fleet (every parameter the login
    sees). Fine for a one-off command; runs list per object instead.
    """
    for fetch in (client.physical_params, client.calculated_params):
        for param in await fetch():
            if param.id == param_id:
                return Param(param.id, int(param.object_id or 0), param.kind)
    raise ConfigError(
        f"parameter {param_id} does not exist or is not visible to this login (in neither its physical "
        "nor its calculated parameter list)"
    )
