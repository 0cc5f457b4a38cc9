"""The optional packages etl asks for are the pyproject extras that bring them (`scale`, `lake`, `lineage`,
`emulator`).
What the CLI says when one is missing or too old: tests/e2e/test_optional.py."""

from __future__ import annotations

import tomllib

from etl.support.optional import REQUIREMENTS
from tests.support import ROOT


def test_the_requirements_are_the_scale_extra():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(REQUIREMENTS.values()) == sorted(pyproject["project"]["optional-dependencies"]["scale"])


def test_the_lake_requirements_are_the_lake_extra():
    from etl.support.optional import LAKE_REQUIREMENTS

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert sorted(LAKE_REQUIREMENTS.values()) == sorted(extras["lake"])
    assert set(LAKE_REQUIREMENTS.values()) <= set(extras["dev"])  # make test installs them


def test_the_emulator_extra_brings_the_server_that_etl_emulator_serve_asks_for():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert [r.split("[")[0] for r in pyproject["project"]["optional-dependencies"]["emulator"]] == ["uvicorn"]


def test_the_lineage_requirements_are_the_lineage_extra():
    from etl.support.optional import LINEAGE_REQUIREMENTS

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert sorted(LINEAGE_REQUIREMENTS.values()) == sorted(extras["lineage"])
    assert set(LINEAGE_REQUIREMENTS.values()) <= set(extras["dev"])


def test_the_dagster_extra_is_in_dev(tmp_path):
    """make test installs it; without it, `import etl.dagster` says which extra brings it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["dagster"]) <= set(extras["dev"])


def test_the_otel_requirements_are_the_otel_extra():
    from etl.support.optional import OTEL_REQUIREMENTS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(OTEL_REQUIREMENTS.values()) == sorted(extras["otel"])
    assert set(OTEL_REQUIREMENTS.values()) <= set(extras["dev"])
