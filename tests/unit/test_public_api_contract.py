"""The public Python API without a server: the names `import etl` exports, and a failed run that raises its
error class with its summary. A notebook's session against the emulator: tests/e2e/test_public_api.py."""

from __future__ import annotations

import pytest

import etl
from tests.support.configs import config_dict, write_config

EXPORTED = [
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


def test_the_exported_names_are_pinned():
    """As httpx does: a name added to or removed from the public API is a decision, made here."""
    assert etl.__all__ == EXPORTED
    for name in EXPORTED:
        assert getattr(etl, name) is not None, name
    assert issubclass(etl.ConfigError, etl.EtlError) and issubclass(etl.AuthError, etl.ApiError)


def test_a_failed_run_raises_an_etl_error_with_its_summary(tmp_path):
    """The library never exits the process: a run that fails raises its error class, with the summary."""
    config = config_dict("http://127.0.0.1:9/sem-restservices", tmp_path / "out")
    config["retry"] = {"attempts": 1}
    with pytest.raises(etl.NetworkError) as caught:
        etl.run(write_config(tmp_path / "etl.yaml", config))
    assert caught.value.exit_code == 4
    assert isinstance(caught.value.summary, etl.RunSummary) and caught.value.summary.status == "failed"


def test_errors_render_as_their_line_in_ipython_and_as_a_traceback_after_debug():
    """IPython asks an exception for `_render_traceback_` before formatting its frames (its protocol)."""
    try:
        raise etl.AuthError("sign-in refused for user 'demo'")
    except etl.AuthError as exc:
        error = exc
    assert error._render_traceback_()[0] == "AuthError: sign-in refused for user 'demo'"
    assert not any("Traceback" in line for line in error._render_traceback_())
    etl.debug()
    try:
        shown = error._render_traceback_()
    finally:
        etl.debug(False)
    assert shown[0] == "Traceback (most recent call last):" and shown[-1].startswith("etl.errors.AuthError")
