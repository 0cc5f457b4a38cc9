"""A login whose password changes when URL-encoded, configs that take it from ETL_PASSWORD, and a search
for secrets in whatever a run printed or wrote."""

from __future__ import annotations

from pathlib import Path

from tests.support.configs import config_dict, write_config

PASSWORD = "Sup3r$ecret&pa ss%w=rd"  # characters that change when URL-encoded
USERS = [{"login": "etl-user", "password": PASSWORD, "objects": "all"}]


def etl_user_config(emulator, tmp_path: Path, **source) -> Path:
    """c.yaml signing in as etl-user with ${ETL_PASSWORD}, output in tmp_path/out; `source` keys are
    changed (None removes one)."""
    data = config_dict(emulator.base_url, tmp_path / "out")
    data["source"].update({"username": "etl-user", "password": "${ETL_PASSWORD}", **source})
    data["source"] = {k: v for k, v in data["source"].items() if v is not None}
    return write_config(tmp_path / "c.yaml", data)


def leaks(text: str | bytes, secrets: set[str]) -> list[str]:
    """The secrets found in the text, sorted."""
    data = text.encode() if isinstance(text, str) else text
    return sorted(s for s in secrets if s.encode() in data)
