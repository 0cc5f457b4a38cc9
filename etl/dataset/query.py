"""DuckDB over a config's output: series views, the quality view, dimension views, and views with names
(and units) joined to ids."""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING

import duckdb

from etl.config import Config, load_config
from etl.model import QUALITY, Series
from etl.quality.view import create_quality_view
from etl.sinks.layout import DIMENSIONS_FOLDER
from etl.sinks.output import Output

if TYPE_CHECKING:  # the lake modules load for lake formats only
    from etl.sinks.lake import Lake

_LAKE = "_lake_"  # the registered Arrow datasets behind the views of lake tables
_FILES = "_files_"  # the files behind a view built on another (quality)
DIMENSIONS = ("objects", "units", "parameters", "zones", "classifiers", "room_types", "rooms", "commands")


@dataclass(frozen=True)
class Scope:
    """What one read needs (etl.read): these views, of one source's rows in [start, end) of these
    parameters (None: no bound). Tables that are read eagerly (PostgreSQL's) read only that."""

    tables: frozenset[str]
    source: str
    start: int | None = None
    end: int | None = None
    params: list[int] | None = None


def connect(config: Config | str | PathLike[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection over the config's output (any format, local or object storage) with
    the views of `etl query`: `raw`, `average`, `candles`, `quality`, the reference tables and the
    `*_named` views (object and parameter names and the unit joined to the ids). Times are shown in UTC."""
    return open_views(config)


def open_views(config: Config | str | PathLike[str], scope: Scope | None = None) -> duckdb.DuckDBPyConnection:
    """`connect`, with the tables' rows narrowed to `scope` where that saves reading them."""
    config = config if isinstance(config, Config) else load_config(config, offline=True)
    output = Output(config)
    storage = output.data
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    if output.lake is not None:
        try:
            _lake_views(con, output.lake, scope)
        finally:
            output.close()  # the tables' rows are read (PostgreSQL) or opened lazily (lake formats)
        _named_views(con)
        return con
    prefix = storage.full("")
    if not storage.local:
        # DuckDB reads through the same fsspec filesystem, so S3-compatible stores need no extension.
        con.register_filesystem(storage.fs)
        prefix = f"{storage.fs.protocol[0] if isinstance(storage.fs.protocol, tuple) else storage.fs.protocol}://{prefix}"
    ext = output.fmt.extension
    parquet = ext == ".parquet"
    for series in Series:
        layout = output.layout(series)
        if any(layout.data_key(f.rsplit("/", 1)[-1]) for f in storage.find(series.value)):
            # union_by_name: files of older versions have no source column
            _files(con, parquet, f"{prefix}/{layout.glob}", hive=True).create_view(str(series))
    present = set(storage.listdir(DIMENSIONS_FOLDER))
    for name in DIMENSIONS:
        if name in present and any(f.endswith(ext) for f in storage.listdir(f"{DIMENSIONS_FOLDER}/{name}")):
            # one file per source (instance of the platform)
            _files(con, parquet, f"{prefix}/{DIMENSIONS_FOLDER}/{name}/*{ext}", hive=False).create_view(name)
    quality = output.quality_layout()
    if any(quality.data_key(f.rsplit("/", 1)[-1]) for f in storage.find(quality.name)):
        _files(con, parquet, f"{prefix}/{quality.glob}", hive=True).create_view(f"{_FILES}{QUALITY}")
        create_quality_view(con, f"{_FILES}{QUALITY}")
    _named_views(con)
    return con


def _files(con: duckdb.DuckDBPyConnection, parquet: bool, glob: str, hive: bool) -> duckdb.DuckDBPyRelation:
    """The files a glob matches, as one relation. The path is handed to DuckDB as a value, never spliced
    into SQL: a quote in sink.path is just a character of it."""
    if parquet:
        return con.read_parquet(glob, hive_partitioning=hive, union_by_name=True)
    return con.read_csv(glob, hive_partitioning=hive, union_by_name=True)


def _lake_views(con: duckdb.DuckDBPyConnection, lake: Lake, scope: Scope | None = None) -> None:
    """Each table's current snapshot as an Arrow dataset DuckDB scans lazily (filters pushed down): a view
    reads one committed version, never a partial commit. PostgreSQL's tables are read through the driver
    (its transaction sees whole commits only)."""
    tables = {str(s): lake.series(s) for s in Series}
    tables.update({QUALITY: lake.quality()})
    tables.update({name: lake.dimension(name) for name in lake.dimension_names() if name in DIMENSIONS})
    if scope is not None:
        tables = {name: table for name, table in tables.items() if name in scope.tables}
    for name, table in tables.items():
        if not table.exists():
            continue
        relation = f"{_LAKE}{name}"
        if scope is None:
            con.register(relation, table.dataset())
        elif name in DIMENSIONS:
            con.register(relation, table.rows(scope.source))
        else:
            con.register(relation, table.rows(scope.source, scope.start, scope.end, scope.params))
        if name == QUALITY:
            create_quality_view(con, relation)
        else:
            con.sql(f"create view {name} as select * from {relation}")


def _named_views(con: duckdb.DuckDBPyConnection) -> None:
    if _has_view(con, "parameters") and _has_view(con, "objects"):
        unit = "p.unit" if "unit" in _columns(con, "parameters") else "null::varchar"
        for name in [*Series, QUALITY]:
            if _has_view(con, name):
                # files of older versions have no source: they belong to the only one there was
                con.sql(
                    f"create view {name}_named as select o.shortname as object_name, p.name as param_name, "
                    f"{unit} as unit, s.* "
                    f"from {name} s left join parameters p on p.id = s.param_id "
                    f"and p.source = coalesce(s.source, p.source) "
                    f"left join objects o on o.id = s.object_id and o.source = coalesce(s.source, o.source)"
                )


def _columns(con: duckdb.DuckDBPyConnection, view: str) -> list[str]:
    return con.sql(f"select * from {view} limit 0").columns


def _has_view(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("select 1 from duckdb_views() where view_name = ?", [name]).fetchall())


def views(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.sql("select view_name from duckdb_views() where not internal order by 1").fetchall()
        if not r[0].startswith((_LAKE, _FILES))
    ]
