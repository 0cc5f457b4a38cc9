"""The default Iceberg catalog, SQLite at {sink.path}/catalog.db, through the standard library's sqlite3.

It is pyiceberg's SQL catalog (`pyiceberg.catalog.sql.SqlCatalog`) without SQLAlchemy: the same two tables
(`iceberg_tables`, `iceberg_namespace_properties`, made with the DDL SQLAlchemy emits for them), the same
rows, the same optimistic swap of a table's `metadata_location`; `load_catalog("etl", type="sql",
uri="sqlite:///.../catalog.db")` reads and writes it as before, and this reads catalogs pyiceberg made.
SQLAlchemy's import (with its ORM) costs a run more CPU than everything else the catalog does, and
its sessions more than the statements they send.

A commit reads the table's current pointer and, when it is still the one the committing table object
was loaded from (our run's handle, which each commit updates in place), takes that object's metadata as
the current one instead of reading and parsing the metadata file again, as pyiceberg's SQL catalog
does on every commit; otherwise it loads the current metadata, as pyiceberg does. Requirements are
then checked, the new metadata file written and the pointer swapped only from the version checked.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog import Catalog, MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.view import View
    from pyiceberg.view.metadata import ViewVersion

# What SQLAlchemy's create_all emits for pyiceberg's models (pyiceberg 0.12, schema v1).
DDL = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables (\n"
    "\tcatalog_name VARCHAR(255) NOT NULL, \n"
    "\ttable_namespace VARCHAR(255) NOT NULL, \n"
    "\ttable_name VARCHAR(255) NOT NULL, \n"
    "\tmetadata_location VARCHAR(1000), \n"
    "\tprevious_metadata_location VARCHAR(1000), \n"
    "\ticeberg_type VARCHAR(5), \n"
    "\tPRIMARY KEY (catalog_name, table_namespace, table_name)\n"
    ")",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (\n"
    "\tcatalog_name VARCHAR(255) NOT NULL, \n"
    "\tnamespace VARCHAR(255) NOT NULL, \n"
    "\tproperty_key VARCHAR(255) NOT NULL, \n"
    "\tproperty_value VARCHAR(1000) NOT NULL, \n"
    "\tPRIMARY KEY (catalog_name, namespace, property_key)\n"
    ")",
)
TABLE_TYPE = "TABLE"
BUSY_TIMEOUT = 30.0  # seconds another process's write may hold the database before a statement fails


def sqlite_path(uri: str) -> str | None:
    """The file of a plain `sqlite:///PATH` URL (no driver, no query), else None."""
    if not uri.startswith("sqlite:///") or "?" in uri:
        return None
    path = uri.removeprefix("sqlite:///")
    return path if path and path != ":memory:" else None


class SqliteCatalog(MetastoreCatalog):
    """pyiceberg's SQL catalog's tables in one SQLite file, one connection per catalog (statements are
    serialized by a lock; each runs in autocommit unless grouped in `_transaction`)."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        path = sqlite_path(self.properties["uri"])
        if path is None:
            raise ValueError(f"not a plain sqlite:/// URL: {self.properties['uri']}")
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        tables = {row[0] for row in self._rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"iceberg_tables", "iceberg_namespace_properties"} <= tables:
            with self._transaction():
                for statement in DDL:
                    self._execute(statement)
        columns = {row[1] for row in self._rows("PRAGMA table_info(iceberg_tables)")}
        # A catalog made by pyiceberg before views (schema v0) has no iceberg_type: pyiceberg keeps it so.
        self._typed = "iceberg_type" in columns

    # -- statements ----------------------------------------------------------------------------------

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _tables_only(self) -> str:
        """Excludes other engines' views from table lookups (schema v1)."""
        return " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)" if self._typed else ""

    def _names(self, identifier: str | Identifier) -> tuple[str, str]:
        return Catalog.namespace_to_string(Catalog.namespace_from(identifier)), Catalog.table_name_from(
            identifier
        )

    def _require(self, namespace: str | Identifier) -> None:
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")

    def _location(self, namespace: str, name: str) -> str | None:
        rows = self._rows(
            "SELECT metadata_location FROM iceberg_tables"
            " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?" + self._tables_only(),
            (self.name, namespace, name),
        )
        return rows[0][0] if rows else None

    def _insert(self, namespace: str, name: str, metadata_location: str) -> None:
        columns = "catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location"
        values: tuple[object, ...] = (self.name, namespace, name, metadata_location, None)
        if self._typed:
            columns += ", iceberg_type"
            values += (TABLE_TYPE,)
        try:
            self._execute(
                f"INSERT INTO iceberg_tables ({columns}) VALUES (?, ?, ?, ?, ?{', ?' * self._typed})", values
            )
        except sqlite3.IntegrityError as exc:
            raise TableAlreadyExistsError(f"Table {namespace}.{name} already exists") from exc

    def _table(self, namespace: str, name: str, metadata_location: str) -> Table:
        io = load_file_io(properties=self.properties, location=metadata_location)
        metadata = FromInputFile.table_metadata(io.new_input(metadata_location))
        return Table(
            identifier=Catalog.identifier_to_tuple(namespace) + (name,),
            metadata=metadata,
            metadata_location=metadata_location,
            io=self._load_file_io(metadata.properties, metadata_location),
            catalog=self,
        )

    # -- tables ----------------------------------------------------------------------------------------

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        self._require(self._names(identifier)[0])
        staged = self._create_staged_table(
            identifier, schema, location, partition_spec, sort_order, properties
        )
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self._insert(*self._names(identifier), staged.metadata_location)
        return Table(
            identifier=staged.name(),
            metadata=staged.metadata,
            metadata_location=staged.metadata_location,
            io=staged.io,
            catalog=self,
        )

    def register_table(
        self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False
    ) -> Table:
        if overwrite:
            raise NotImplementedError("`overwrite` isn't supported")
        namespace, name = self._names(identifier)
        self._require(namespace)
        self._insert(namespace, name, metadata_location)
        return self.load_table(identifier)

    def load_table(self, identifier: str | Identifier) -> Table:
        namespace, name = self._names(identifier)
        location = self._location(namespace, name)
        if not location:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{name}")
        return self._table(namespace, name, location)

    def table_exists(self, identifier: str | Identifier) -> bool:
        """Its row and metadata pointer, without reading its metadata file."""
        return bool(self._location(*self._names(identifier)))

    def drop_table(self, identifier: str | Identifier) -> None:
        namespace, name = self._names(identifier)
        cursor = self._execute(
            "DELETE FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
            + self._tables_only(),
            (self.name, namespace, name),
        )
        if cursor.rowcount < 1:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{name}")

    def rename_table(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> Table:
        namespace, name = self._names(from_identifier)
        to_namespace, to_name = self._names(to_identifier)
        self._require(to_namespace)
        try:
            cursor = self._execute(
                "UPDATE iceberg_tables SET table_namespace = ?, table_name = ?"
                " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?" + self._tables_only(),
                (to_namespace, to_name, self.name, namespace, name),
            )
        except sqlite3.IntegrityError as exc:
            raise TableAlreadyExistsError(f"Table {to_namespace}.{to_name} already exists") from exc
        if cursor.rowcount < 1:
            raise NoSuchTableError(f"Table does not exist: {name}")
        return self.load_table(to_identifier)

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        namespace, name = self._names(table.name())
        location = self._location(namespace, name)
        current: Table | None = None
        if location and not isinstance(table, StagedTable):
            # The committing object is current when the pointer still names its metadata file (files are
            # never rewritten): no need to read and parse that file again.
            current = table if location == table.metadata_location else self._table(namespace, name, location)
        elif location:
            current = self._table(namespace, name, location)
        staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        if current is not None and staged.metadata == current.metadata:
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        if current is None:
            self._insert(namespace, name, staged.metadata_location)
        else:
            cursor = self._execute(
                "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?"
                " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?",
                (
                    staged.metadata_location,
                    current.metadata_location,
                    self.name,
                    namespace,
                    name,
                    current.metadata_location,
                ),
            )
            if cursor.rowcount < 1:
                raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        if namespace:
            self._require(namespace)
        rows = self._rows(
            "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ?"
            + self._tables_only(),
            (self.name, Catalog.namespace_to_string(namespace)),
        )
        return [Catalog.identifier_to_tuple(ns) + (name,) for ns, name in rows]

    # -- namespaces ------------------------------------------------------------------------------------

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        text = Catalog.namespace_to_string(Catalog.identifier_to_tuple(namespace), NoSuchNamespaceError)
        like = text.replace("!", "!!").replace("_", "!_").replace("%", "!%") + ".%"
        for table, column in (
            ("iceberg_tables", "table_namespace"),
            ("iceberg_namespace_properties", "namespace"),
        ):
            if self._rows(
                f"SELECT 1 FROM {table} WHERE catalog_name = ? AND ({column} = ? OR {column} LIKE ? ESCAPE '!') LIMIT 1",
                (self.name, text, like),
            ):
                return True
        return False

    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        if self.namespace_exists(namespace):
            raise NamespaceAlreadyExistsError(f"Namespace {namespace} already exists")
        text = Catalog.namespace_to_string(namespace, NoSuchNamespaceError)
        try:
            with self._transaction():
                for key, value in (properties or {"exists": "true"}).items():
                    self._execute(
                        "INSERT INTO iceberg_namespace_properties"
                        " (catalog_name, namespace, property_key, property_value) VALUES (?, ?, ?, ?)",
                        (self.name, text, key, value),
                    )
        except sqlite3.IntegrityError as exc:  # another writer made it meanwhile
            raise NamespaceAlreadyExistsError(f"Namespace {namespace} already exists") from exc

    def drop_namespace(self, namespace: str | Identifier) -> None:
        self._require(namespace)
        text = Catalog.namespace_to_string(namespace)
        if tables := self.list_tables(namespace):
            raise NamespaceNotEmptyError(f"Namespace {text} is not empty. {len(tables)} tables exist.")
        self._execute(
            "DELETE FROM iceberg_namespace_properties WHERE catalog_name = ? AND namespace = ?",
            (self.name, text),
        )

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        if namespace:
            self._require(namespace)
        rows = self._rows(
            "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ?"
            " UNION SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?",
            (self.name, self.name),
        )
        prefix = Catalog.identifier_to_tuple(namespace)
        level = len(prefix) + 1
        found = {Catalog.identifier_to_tuple(row[0]) for row in rows}
        return list({ns[:level] for ns in found if len(ns) >= level and ns[: level - 1] == prefix})

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        text = Catalog.namespace_to_string(namespace)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace {text} does not exists")
        rows = self._rows(
            "SELECT property_key, property_value FROM iceberg_namespace_properties"
            " WHERE catalog_name = ? AND namespace = ?",
            (self.name, text),
        )
        return dict(rows)

    def update_namespace_properties(
        self, namespace: str | Identifier, removals: set[str] | None = None, updates: Properties = EMPTY_DICT
    ) -> PropertiesUpdateSummary:
        text = Catalog.namespace_to_string(namespace)
        current = self.load_namespace_properties(namespace)
        summary, _ = self._get_updated_props_and_update_summary(current, removals, updates)
        with self._transaction():
            for key in [*(removals or ()), *updates]:
                self._execute(
                    "DELETE FROM iceberg_namespace_properties"
                    " WHERE catalog_name = ? AND namespace = ? AND property_key = ?",
                    (self.name, text, key),
                )
            for key, value in updates.items():
                self._execute(
                    "INSERT INTO iceberg_namespace_properties"
                    " (catalog_name, namespace, property_key, property_value) VALUES (?, ?, ?, ?)",
                    (self.name, text, key, value),
                )
        return summary

    # -- views: none (as pyiceberg's SQL catalog) ----------------------------------------------------------

    def create_view(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        view_version: ViewVersion,
        location: str | None = None,
        properties: Properties = EMPTY_DICT,
    ) -> View:
        raise NotImplementedError

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        raise NotImplementedError

    def view_exists(self, identifier: str | Identifier) -> bool:
        raise NotImplementedError

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        raise NotImplementedError

    def drop_view(self, identifier: str | Identifier) -> None:
        raise NotImplementedError

    def load_view(self, identifier: str | Identifier) -> View:
        raise NotImplementedError

    def close(self) -> None:
        with self._lock:
            self._db.close()
