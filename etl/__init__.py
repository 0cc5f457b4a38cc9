"""etl: time series from the monitoring platform into files, data lakes and notebooks.

    import etl

    summary = etl.run("configs/demo.yaml")                 # what `etl run -c configs/demo.yaml` does
    frame = etl.read("configs/demo.yaml", "raw", named=True)  # a pandas DataFrame, names and units joined
    con = etl.connect("configs/demo.yaml")                 # DuckDB with the views of `etl query`

    with etl.SyncMonitoringClient(base_url, username, password) as client:
        client.objects()                                   # the platform's interface, one method an endpoint

Every failure is an `EtlError` subclass whose `exit_code` is what the CLI exits with. In IPython and
Jupyter it shows as its one line; `etl.debug()` shows the traceback too.
"""

from __future__ import annotations

from etl.support.version import __version__

# Not `from typing import TYPE_CHECKING`: this module is the first the `etl` command loads, and a Ctrl-C
# while it loads would be a traceback from inside an import (etl/cli/__init__.py catches it after).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from etl.client import MonitoringClient, SyncMonitoringClient
    from etl.config import Config, load_config
    from etl.dataset.query import connect
    from etl.dataset.read import read
    from etl.errors import (
        ApiError,
        AuthError,
        ConfigError,
        DataError,
        EtlError,
        Interrupted,
        LockedError,
        NetworkError,
        ServerError,
        StorageError,
        debug,
    )
    from etl.pipeline.run import RunSummary, run

# Loaded on first use: `import etl` (and the CLI, which imports the package) stays cheap, and a notebook
# that only reads pays nothing for the pipeline.
_EXPORTS = {
    "run": "etl.pipeline.run",
    "RunSummary": "etl.pipeline.summary",
    "read": "etl.dataset.read",
    "connect": "etl.dataset.query",
    "Config": "etl.config",
    "load_config": "etl.config",
    "MonitoringClient": "etl.client",
    "SyncMonitoringClient": "etl.client",
    "EtlError": "etl.errors",
    "ConfigError": "etl.errors",
    "ApiError": "etl.errors",
    "AuthError": "etl.errors",
    "NetworkError": "etl.errors",
    "ServerError": "etl.errors",
    "DataError": "etl.errors",
    "StorageError": "etl.errors",
    "LockedError": "etl.errors",
    "Interrupted": "etl.errors",
    "debug": "etl.errors",
}

__all__ = [
    "ApiError",
    "AuthError",
    "Config",
    "ConfigError",
    "DataError",
    "EtlError",
    "Interrupted",
    "LockedError",
    "MonitoringClient",
    "NetworkError",
    "RunSummary",
    "ServerError",
    "StorageError",
    "SyncMonitoringClient",
    "__version__",
    "connect",
    "debug",
    "load_config",
    "read",
    "run",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'etl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
