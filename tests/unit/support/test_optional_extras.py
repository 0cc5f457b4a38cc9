"""The optional packages etl asks for are the pyproject extras that bring them (`scale`, `plot`, `lake`,
`postgres`, `lineage`, `otel`, `emulator`). What the CLI says when one is missing or too old:
tests/e2e/test_optional.py."""

from __future__ import annotations

import tomllib

from etl.support.optional import EXTRAS
from tests.support import ROOT


def test_the_requirements_etl_names_are_its_extras_and_make_test_installs_them():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, requirements in EXTRAS.items():
        assert sorted(requirements.values()) == sorted(extras[name]), name
        assert set(requirements.values()) <= set(extras["dev"]), name


def test_the_emulator_extra_brings_the_server_that_etl_emulator_serve_asks_for():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert [r.split("[")[0] for r in pyproject["project"]["optional-dependencies"]["emulator"]] == ["uvicorn"]


def test_the_dagster_extra_is_in_dev(tmp_path):
    """make test installs it; without it, `import etl.dagster` says which extra brings it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["dagster"]) <= set(extras["dev"])
