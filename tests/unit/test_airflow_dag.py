"""The Airflow example in docs/ acts on the exit codes etl/errors.py defines (the cron line is run through
the shell in tests/e2e/test_orchestration.py)."""

from __future__ import annotations

import ast

from etl.errors import ExitCode
from tests.support import ROOT

DOCS = ROOT / "docs"


def test_airflow_dag_maps_exit_codes_like_etl():
    tree = ast.parse((DOCS / "airflow/etl_dag.py").read_text())
    sets = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("RETRY", "SKIP", "DIFFERS")
    }
    assert sets["RETRY"] == {ExitCode.NETWORK, ExitCode.SERVER, ExitCode.INTERRUPTED}
    assert sets["SKIP"] == {ExitCode.LOCKED}
    assert sets["DIFFERS"] == ExitCode.DIFFERS
