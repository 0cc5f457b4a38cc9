"""The default Iceberg catalog (etl/sinks/lake/sqlite_catalog.py) is pyiceberg's SQL catalog without
SQLAlchemy: each reads and writes what the other made, and a commit from a stale table is refused."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest

SCHEMA = pa.schema([("a", pa.int64())])


def _ours(tmp_path):
    from etl.sinks.lake.iceberg_table import catalog
    from etl.storage.atomic import Storage

    return catalog(Storage(str(tmp_path)), None)


def _pyiceberg(tmp_path):
    from pyiceberg.catalog import load_catalog

    return load_catalog(
        "etl", type="sql", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}"
    )


def _rows(table) -> list[int]:
    return sorted(table.scan().to_arrow().column("a").to_pylist())


def test_the_same_tables_and_rows_as_pyiceberg_makes(tmp_path):
    from etl.sinks.lake.sqlite_catalog import SqliteCatalog

    ours = _ours(tmp_path)
    assert isinstance(ours, SqliteCatalog)
    reference = tmp_path / "reference"
    reference.mkdir()
    theirs = _pyiceberg(reference)
    theirs.create_namespace_if_not_exists("etl")
    for path in (tmp_path, reference):
        with sqlite3.connect(path / "catalog.db") as db:
            assert db.execute("SELECT * FROM iceberg_namespace_properties").fetchall() == [
                ("etl", "etl", "exists", "true")
            ]
    schema = {
        path: sqlite3.connect(path / "catalog.db")
        .execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetchall()
        for path in (tmp_path, reference)
    }
    assert schema[tmp_path] == [(n, sql.replace(" IF NOT EXISTS", "")) for n, sql in schema[reference]]


def test_each_reads_and_commits_what_the_other_made(tmp_path):
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    ours = _ours(tmp_path)
    table = ours.create_table(("etl", "x"), schema=SCHEMA)
    table.append(pa.table({"a": [1, 2]}))
    theirs = _pyiceberg(tmp_path)
    assert theirs.list_tables("etl") == [("etl", "x")]
    assert _rows(theirs.load_table("etl.x")) == [1, 2]
    theirs.load_table("etl.x").append(pa.table({"a": [3]}))
    theirs.create_table(("etl", "y"), schema=SCHEMA).append(pa.table({"a": [9]}))
    assert _rows(ours.load_table("etl.x")) == [1, 2, 3]
    assert sorted(ours.list_tables("etl")) == [("etl", "x"), ("etl", "y")]
    assert _rows(ours.load_table("etl.y")) == [9]
    assert ours.table_exists("etl.x") and not ours.table_exists("etl.z")
    with pytest.raises(NoSuchTableError):
        ours.load_table("etl.z")
    with pytest.raises(TableAlreadyExistsError):
        ours.create_table(("etl", "y"), schema=SCHEMA)
    ours.drop_table("etl.y")
    assert theirs.list_tables("etl") == [("etl", "x")]


def test_a_commit_is_checked_against_the_current_version_not_the_committing_object(tmp_path):
    """A commit takes its table object's metadata as the current one only while the catalog still points
    at it: from an object another writer got ahead of, an append is refused (pyiceberg's transaction
    then refreshes and retries) and a property change lands on top of the other writer's snapshot."""
    from pyiceberg.exceptions import CommitFailedException

    ours = _ours(tmp_path)
    stale = ours.create_table(("etl", "x"), schema=SCHEMA)
    _pyiceberg(tmp_path).load_table("etl.x").append(pa.table({"a": [1]}))
    txn = stale.transaction()
    txn.append(pa.table({"a": [2]}))
    with pytest.raises(CommitFailedException):
        ours.commit_table(stale, txn._requirements, txn._updates)
    assert _rows(ours.load_table("etl.x")) == [1]
    txn = stale.transaction()
    txn.set_properties({"k": "v"})
    txn.commit_transaction()
    current = ours.load_table("etl.x")
    assert _rows(current) == [1] and current.metadata.properties["k"] == "v"
    stale.append(pa.table({"a": [2]}))  # refreshed by pyiceberg's retry, then committed on top
    assert _rows(ours.load_table("etl.x")) == [1, 2]


def test_a_catalog_pyiceberg_made_before_views_stays_as_it_is(tmp_path):
    """A schema v0 catalog (no iceberg_type column) is read and written without being migrated."""
    theirs = _pyiceberg(tmp_path)
    theirs.create_namespace_if_not_exists("etl")
    theirs.create_table(("etl", "x"), schema=SCHEMA)
    with sqlite3.connect(tmp_path / "catalog.db") as db:
        db.execute("ALTER TABLE iceberg_tables DROP COLUMN iceberg_type")
    ours = _ours(tmp_path)
    ours.load_table("etl.x").append(pa.table({"a": [1]}))
    ours.create_table(("etl", "y"), schema=SCHEMA)
    assert sorted(ours.list_tables("etl")) == [("etl", "x"), ("etl", "y")]
    with sqlite3.connect(tmp_path / "catalog.db") as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(iceberg_tables)")]
    assert "iceberg_type" not in columns
