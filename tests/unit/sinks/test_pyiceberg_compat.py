"""pyiceberg's private names stay in etl/sinks/lake/pyiceberg_compat.py, which refuses a pyiceberg release
etl is not tested with. Its one override is tested by tests/unit/sinks/test_iceberg_race.py."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from etl.errors import ConfigError

ETL = Path(__file__).resolve().parents[3] / "etl"
COMPAT = ETL / "sinks" / "lake" / "pyiceberg_compat.py"


def private_imports(path: Path) -> list[str]:
    """`from pyiceberg... import _name` and `import pyiceberg._module` in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg"):
            modules = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names if a.name.startswith("pyiceberg")]
        else:
            continue
        found += [m for m in modules if any(part.startswith("_") for part in m.split("."))]
    return found


def test_no_private_pyiceberg_name_is_imported_outside_the_compat_module():
    assert private_imports(COMPAT)  # the check sees what it looks for
    offenders = {
        str(path.relative_to(ETL)): names
        for path in sorted(ETL.rglob("*.py"))
        if path != COMPAT and (names := private_imports(path))
    }
    assert offenders == {}


def test_the_installed_pyiceberg_is_supported_and_others_are_refused(monkeypatch):
    import pyiceberg

    from etl.sinks.lake import pyiceberg_compat

    assert pyiceberg_compat.supported(pyiceberg.__version__)
    low, high = pyiceberg_compat.REQUIREMENT.split(">=")[1].split(",<")
    assert pyiceberg_compat.supported(low) and pyiceberg_compat.supported(f"{low}.9rc1")
    assert not pyiceberg_compat.supported(high) and not pyiceberg_compat.supported("0.1.0")

    monkeypatch.setattr(pyiceberg, "__version__", high)
    monkeypatch.delitem(sys.modules, "etl.sinks.lake.pyiceberg_compat")
    with pytest.raises(ConfigError) as refused:
        importlib.import_module("etl.sinks.lake.pyiceberg_compat")
    assert str(refused.value) == (
        f"sink.format iceberg needs {pyiceberg_compat.REQUIREMENT}, found pyiceberg {high}:"
        f" pip install '{pyiceberg_compat.REQUIREMENT}'"
    )
    assert refused.value.exit_code == 2


def test_a_transaction_computes_its_metadata_once_per_change(tmp_path, monkeypatch):
    """pyiceberg's transaction applies its staged updates to the table's metadata and deep-copies it at
    every read of `table_metadata`; ours once per change of either. When pyiceberg's caches too (the
    first assertion fails), the override can go."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from etl.sinks.lake import pyiceberg_compat

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    table = catalog.create_table(("n", "t"), schema=pa.schema([("a", pa.int64())]))
    theirs = table.transaction()
    assert theirs.table_metadata is not theirs.table_metadata  # computed again at each read

    computed = []
    compute = pyiceberg_compat.update_table_metadata
    monkeypatch.setattr(
        pyiceberg_compat, "update_table_metadata", lambda *a: computed.append(1) or compute(*a)
    )
    txn = pyiceberg_compat.transaction(table)
    first = txn.table_metadata
    assert txn.table_metadata is first and len(computed) == 1
    txn.set_properties({"k": "v"})  # a staged update: computed again, once
    assert txn.table_metadata.properties["k"] == "v" and txn.table_metadata is txn.table_metadata
    assert len(computed) == 2
    with txn.update_snapshot().merge_append() as append:  # what a commit stages reads the latest
        pass
    assert txn.table_metadata.current_snapshot_id == append.snapshot_id
    txn.commit_transaction()
    assert table.metadata.properties["k"] == "v" and table.current_snapshot() is not None
