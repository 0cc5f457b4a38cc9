"""The client (etl.client) against a test emulator, with quick retries."""

from __future__ import annotations

from etl.client import RetryPolicy, SyncMonitoringClient

FAST = RetryPolicy(attempts=10, backoff_initial=0.01, backoff_max=0.05, deadline=30)


def client_for(emulator, username="demo", password="demo", retry=FAST, **kw) -> SyncMonitoringClient:
    return SyncMonitoringClient(emulator.base_url, username, password, retry=retry, **kw)
