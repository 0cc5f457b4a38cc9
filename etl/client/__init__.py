"""Client of the monitoring platform: `MonitoringClient` (async) and `SyncMonitoringClient`."""

from etl.client.api import MonitoringClient, SyncMonitoringClient
from etl.client.models import Candles, ObjectFull, ObjectShort, Parameter, Points, User
from etl.client.retry import ClientStats, RetryPolicy

__all__ = [
    "Candles", "ClientStats", "MonitoringClient", "ObjectFull", "ObjectShort", "Parameter", "Points",
    "RetryPolicy", "SyncMonitoringClient", "User",
]
