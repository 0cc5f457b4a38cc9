"""PostgreSQL tables (sink.format postgres): a table per series, the quality dataset and each reference
table, in the schema `sink.schema`, written exactly once through the lake tables' committer.

One commit is one transaction: it deletes the source's rows in what the group's windows cover (the day
partitions they fall in, through the (param_id, time) index), COPYs the new rows in binary (ADBC's
driver writes the Arrow batches as they are), and inserts the group's checkpoint into `_etl_commits`;
the state log learns of it afterwards, and `recover` reads back a checkpoint the log missed
(docs/postgres.md). Readers see a commit whole or not at all.

Series and quality tables are range-partitioned by day on their time column; the partitions of the days
a commit touches, and of the days after the newest, are made before its transaction and only when
missing, so an hourly run makes none most of the time and nothing scans a whole table. Where the
`timescaledb` extension is installed, a hypertable with day chunks takes the place of the partitioning.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.dataset as ds

from etl.model import QUALITY, Series
from etl.sinks.lake.common import Change, Checkpoint, DayFiles, LakeTable, Policy, Replace
from etl.storage.postgres import Database, lock_key, quoted
from etl.timeutil import DAY_MS

COMMITS = "_etl_commits"  # the checkpoint of each commit: (table, app, version)
STAGE = "_etl_stage_"  # a Dask worker's rows, until the commit that moves them in
AHEAD = 7  # day partitions made past the newest day a commit writes
STAGE_MAX_AGE_S = 86_400  # a stage table no commit took after this long is a dead run's


def pg_type(kind: pa.DataType) -> str:
    """A column's PostgreSQL type: the Parquet sinks' types; text for strings and for the JSON text of
    nested values."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_int8(kind) or pa.types.is_int16(kind) or pa.types.is_uint8(kind):
        return "smallint"
    if pa.types.is_int32(kind) or pa.types.is_uint16(kind):
        return "integer"
    if pa.types.is_integer(kind):
        return "bigint"
    if pa.types.is_float32(kind):
        return "real"
    if pa.types.is_floating(kind):
        return "double precision"
    if pa.types.is_timestamp(kind):
        return "timestamptz" if kind.tz else "timestamp"
    if pa.types.is_date(kind):
        return "date"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "bytea"
    return "text"


def timestamp(ms: int) -> str:
    """A timestamptz literal of epoch milliseconds (made from an int: nothing of a user's in it)."""
    return f"timestamptz '{datetime.fromtimestamp(ms / 1000, UTC):%Y-%m-%d %H:%M:%S.%f}+00'"


def ids(values: Sequence[int]) -> str:
    return "'{" + ",".join(str(int(v)) for v in values) + "}'::bigint[]"


class PostgresTable(LakeTable):
    """One table of the schema; `name` as the lake names it (`raw`, `quality`, `dimensions/objects`)."""

    kind = "postgres"

    def __init__(self, database: Database, name: str, time_key: str | None, policy: Policy) -> None:
        super().__init__(name, (), time_key, policy)
        self.db = database
        self.relation = name.rsplit("/", 1)[-1]
        self.qualified = quoted(database.schema, self.relation)
        self._columns: list[str] | None = None  # the table's columns in order (empty: no table)
        self._days: set[int] | None = None  # day partitions made (days since the epoch)
        self._partitioned: bool | None = None  # by day, by etl (not a hypertable, not a reference table)

    @property
    def uri(self) -> str:
        return f"postgres:{self.db.display}:{self.db.schema}.{self.relation}"

    # -- the table -------------------------------------------------------------------------------------

    def _known(self) -> list[str]:
        if self._columns is None:
            rows = self.db.rows(
                "select column_name from information_schema.columns where table_schema = $1 "
                "and table_name = $2 order by ordinal_position",
                (self.db.schema, self.relation),
            )
            self._columns = [str(r[0]) for r in rows]
        return self._columns

    def exists(self) -> bool:
        return bool(self._known())

    def prepare(self, schema: pa.Schema) -> None:
        if self.exists():
            self._add_missing(schema)
            return
        columns = ", ".join(f"{quoted(f.name)} {pg_type(f.type)}" for f in schema)
        with self.db.transaction("create tables") as cursor:
            self._ddl_lock(cursor)
            cursor.execute(f"create schema if not exists {quoted(self.db.schema)}")
            cursor.execute(
                f"create table if not exists {quoted(self.db.schema, COMMITS)} (table_name text, app text, "
                "version bigint, run text, committed timestamptz default now(), checkpoint text, "
                "primary key (table_name, app, version))"
            )
            cursor.execute("select exists (select 1 from pg_extension where extname = 'timescaledb')")
            hypertable = bool(cursor.fetchall()[0][0]) and self.time_key is not None
            partitioning = (
                f" partition by range ({quoted(self.time_key)})"
                if self.time_key is not None and not hypertable
                else ""
            )
            cursor.execute(f"create table if not exists {self.qualified} ({columns}){partitioning}")
            if self.time_key is not None:
                if hypertable:
                    cursor.execute(
                        "select create_hypertable($1::regclass, $2::name, chunk_time_interval => "
                        "interval '1 day', if_not_exists => true)",
                        (self.qualified, self.time_key),
                    )
                cursor.execute(
                    f"create index if not exists {quoted(self.relation + '_param_time')} on {self.qualified} "
                    f"(param_id, {quoted(self.time_key)})"
                )
            self._named_views(cursor)
        self._columns = None

    def _ddl_lock(self, cursor: Any) -> None:
        """Runs of other sources make the same tables, partitions and views: one at a time."""
        cursor.execute("select pg_advisory_xact_lock($1)", (lock_key(f"{self.db.schema}/ddl"),))

    def _named_views(self, cursor: Any) -> None:
        """`{series}_named` (object and parameter names and the unit beside the ids, as `etl query` has
        them) once a series table and the reference tables are there."""
        cursor.execute(
            "select table_name, column_name from information_schema.columns where table_schema = $1 "
            "and table_name in ('parameters', 'objects', 'raw', 'average', 'candles', 'quality')",
            (self.db.schema,),
        )
        have: dict[str, set[str]] = {}
        for table, column in cursor.fetchall():
            have.setdefault(str(table), set()).add(str(column))
        if not {"parameters", "objects"} <= set(have):
            return
        unit = "p.unit" if "unit" in have["parameters"] else "null::text"
        schema = self.db.schema
        for name in [*(s.value for s in Series), QUALITY]:
            if name in have:
                cursor.execute(
                    f"create or replace view {quoted(schema, name + '_named')} as select o.shortname as "
                    f"object_name, p.name as param_name, {unit} as unit, s.* from {quoted(schema, name)} s "
                    f"left join {quoted(schema, 'parameters')} p on p.id = s.param_id and p.source = s.source "
                    f"left join {quoted(schema, 'objects')} o on o.id = s.object_id and o.source = s.source"
                )

    def _add_missing(self, schema: pa.Schema) -> None:
        """Columns the rows carry and the table lacks (a table made by an older version): added, null in
        the rows before."""
        have = set(self._known())
        missing = [f for f in schema if f.name not in have]
        if not missing:
            return
        with self.db.transaction("add columns") as cursor:
            self._ddl_lock(cursor)
            for f in missing:
                cursor.execute(
                    f"alter table {self.qualified} add column if not exists {quoted(f.name)} {pg_type(f.type)}"
                )
        self._columns = None

    def _conform(self, rows: pa.Table) -> pa.Table:
        """The rows in the table's column order (COPY's), nulls where they lack a column."""
        self.prepare(rows.schema)
        columns = [
            rows.column(name) if name in rows.column_names else pa.nulls(rows.num_rows, pa.string())
            for name in self._known()
        ]
        return pa.table(columns, names=self._known())

    def _partitions(self, days: set[int]) -> None:
        """The day partitions of `days` made where missing, and AHEAD more past the newest, in a
        transaction of their own before the commit's."""
        if self.time_key is None or not days:
            return
        if self._partitioned is None:
            self._partitioned = bool(
                self.db.rows(
                    "select exists (select 1 from pg_partitioned_table where partrelid = $1::regclass)",
                    (self.qualified,),
                )[0][0]
            )
        if not self._partitioned:  # a hypertable makes its chunks itself
            return
        if self._days is None:
            rows = self.db.rows(
                "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = $1::regclass",
                (self.qualified,),
            )
            prefix = f"{self.relation}_"
            self._days = {
                int(datetime.strptime(name[len(prefix) :], "%Y%m%d").replace(tzinfo=UTC).timestamp())
                // 86_400
                for (name,) in rows
                if str(name).startswith(prefix) and str(name)[len(prefix) :].isdigit()
            }
        wanted = set(days)
        if max(days) >= max(self._days, default=max(days)):
            wanted |= set(range(max(days) + 1, max(days) + 1 + AHEAD))
        missing = sorted(wanted - self._days)
        if not set(days) - self._days:
            return
        with self.db.transaction("create partitions") as cursor:
            self._ddl_lock(cursor)
            for day in missing:
                name = f"{self.relation}_{datetime.fromtimestamp(day * 86_400, UTC):%Y%m%d}"
                cursor.execute(
                    f"create table if not exists {quoted(self.db.schema, name)} partition of {self.qualified} "
                    f"for values from ({timestamp(day * DAY_MS)}) to ({timestamp((day + 1) * DAY_MS)})"
                )
        self._days |= set(missing)

    # -- committing ------------------------------------------------------------------------------------

    def _where(self, replace: Replace) -> tuple[str, tuple[Any, ...]]:
        """The rows `replace` covers: the source's, in the listed parameters' ranges of the time column."""
        if replace.groups is None:
            return "source = $1", (replace.source,)
        key = quoted(replace.time_key)
        ranges = " or ".join(
            f"({key} >= {timestamp(a)} and {key} < {timestamp(b)} and param_id = any({ids(p)}))"
            for a, b, p in replace.groups
        )
        return f"source = $1 and ({ranges or 'false'})", (replace.source,)

    def _commit(self, change: Change) -> list[str]:
        rows, replace, checkpoint = change.rows, change.replace, change.checkpoint
        if rows is not None:
            rows = self._conform(rows)
        elif not self.exists() and checkpoint is None:
            return []  # nothing to replace in a table that is not there, nor rows to add
        if replace is not None and replace.groups is not None:
            self._partitions(
                {day for a, b, _ in replace.groups for day in range(a // DAY_MS, (b - 1) // DAY_MS + 1)}
            )
        if (
            change.ready is not None
        ):  # what must be visible first (the quality rows) commits on this connection
            change.ready()
        columns = ", ".join(quoted(c) for c in self._known())
        with self.db.transaction(f"commit to {self.relation}") as cursor:
            if replace is not None:
                where, parameters = self._where(replace)
                cursor.execute(f"delete from {self.qualified} where {where}", parameters)
            if rows is not None and rows.num_rows:
                cursor.adbc_ingest(self.relation, rows, mode="append", db_schema_name=self.db.schema)
            for stage in change.files:
                cursor.execute(
                    f"insert into {self.qualified} ({columns}) select {columns} "
                    f"from {quoted(self.db.schema, str(stage))}"
                )
                cursor.execute(f"drop table {quoted(self.db.schema, str(stage))}")
            if checkpoint is not None:
                cursor.execute(
                    f"insert into {quoted(self.db.schema, COMMITS)} (table_name, app, version, run, checkpoint) "
                    "values ($1, $2, $3, $4, $5)",
                    (
                        self.name,
                        checkpoint.app,
                        checkpoint.version,
                        checkpoint.run,
                        orjson.dumps(checkpoint.properties()).decode(),
                    ),
                )
        return []

    def write_files(self, rows: pa.Table) -> list[Any]:
        """A Dask worker's rows COPYed into a stage table of their own (unlogged, named at random) that the
        run's commit moves into the table; a killed run's stage goes with the upkeep's sweep."""
        rows = self._conform(rows)
        name = f"{STAGE}{int(time.time())}_{uuid.uuid4().hex[:12]}"
        with self.db.transaction("stage rows") as cursor:
            cursor.execute(f"create unlogged table {quoted(self.db.schema, name)} (like {self.qualified})")
            cursor.adbc_ingest(name, rows, mode="append", db_schema_name=self.db.schema)
        return [name]

    # -- checkpoints -----------------------------------------------------------------------------------

    def history(self, app: str, after: int) -> list[Checkpoint]:
        rows = self.db.rows(
            f"select checkpoint from {quoted(self.db.schema, COMMITS)} where table_name = $1 and app = $2 "
            "and version > $3 order by version",
            (self.name, app, after),
        )
        found = [Checkpoint.parse(orjson.loads(text)) for (text,) in rows]
        return [c for c in found if c is not None]

    def latest(self, app: str) -> int:
        if not self.exists():
            return 0
        rows = self.db.rows(
            f"select coalesce(max(version), 0) from {quoted(self.db.schema, COMMITS)} "
            "where table_name = $1 and app = $2",
            (self.name, app),
        )
        return int(rows[0][0])

    # -- reading ---------------------------------------------------------------------------------------

    def _select(self, where: str = "true", parameters: tuple[Any, ...] = ()) -> pa.Table:
        table: pa.Table = self.db.arrow(f"select * from {self.qualified} where {where}", parameters)
        # Plain types, without the driver's field metadata: the same schema as the other sinks' reads.
        return table.cast(pa.schema([pa.field(f.name, f.type) for f in table.schema]))

    def dataset(self) -> ds.Dataset:
        """The table's rows as they are now (one transaction), held in memory: DuckDB reads them through
        this, PostgreSQL's own SQL reads them where they are."""
        return ds.dataset(self._select())

    def rows(
        self, source: str, start: int | None = None, end: int | None = None, params: list[int] | None = None
    ) -> ds.Dataset:
        """Only the source's rows a reader asks for, selected in PostgreSQL (a quality row's `day` is the
        start of its day: the bounds are taken to whole days there)."""
        where, parameters = ["source = $1"], (source,)
        if self.time_key is not None:
            key = quoted(self.time_key)
            whole = self.time_key != "ts"
            if start is not None:
                where.append(f"{key} >= {timestamp(start // DAY_MS * DAY_MS if whole else start)}")
            if end is not None:
                where.append(f"{key} < {timestamp(-(-end // DAY_MS) * DAY_MS if whole else end)}")
        if params is not None and "param_id" in self._known():
            where.append(f"param_id = any({ids(params)})")
        return ds.dataset(self._select(" and ".join(where), parameters))

    def _read(self, source: str, params: list[int], start: int, end: int) -> pa.Table:
        assert self.time_key is not None
        replace = Replace(source, self.time_key, ((start, end, tuple(params)),))
        return self._select(*self._where(replace))

    def _rows_of(self, source: str) -> pa.Table:
        return self._select("source = $1", (source,))

    # -- upkeep ------------------------------------------------------------------------------------------

    def day_files(self, source: str | None = None) -> list[DayFiles]:
        return []  # rows, not files: nothing to compact

    def _compact(self, days: list[DayFiles], source: str) -> int:
        return 0

    def _refresh(self) -> None:
        self._columns = None

    def _expire(self, retention_ms: int | None, versions: int, now: bool = False) -> int:
        """Checkpoints of commits beyond each app's newest `versions` or older than the retention; each
        app's last one stays (`latest`)."""
        if not self.exists():
            return 0
        age = (
            ""
            if retention_ms is None
            else f" or c.committed < now() - interval '{int(retention_ms)} milliseconds'"
        )
        commits = quoted(self.db.schema, COMMITS)
        with self.db.transaction("expire checkpoints") as cursor:
            cursor.execute(
                f"delete from {commits} c using (select app, max(version) as last from {commits} "
                "where table_name = $1 group by app) l where c.table_name = $1 and c.app = l.app "
                f"and c.version < l.last and (c.version <= l.last - $2{age})",
                (self.name, versions),
            )
            return max(0, int(cursor.rowcount))

    def _sweep(self, retention_ms: int) -> int:
        """Stage tables of Dask workers whose run died before its commit took them."""
        found = self.db.rows(
            "select tablename from pg_tables where schemaname = $1 and tablename like $2",
            (self.db.schema, STAGE.replace("_", "\\_") + "%"),
        )
        cutoff = time.time() - STAGE_MAX_AGE_S
        old = [
            name
            for (name,) in found
            if str(name)[len(STAGE) :].split("_", 1)[0].isdigit()
            and int(str(name)[len(STAGE) :].split("_", 1)[0]) < cutoff
        ]
        for name in old:
            with self.db.transaction("drop a stage table") as cursor:
                cursor.execute(f"drop table if exists {quoted(self.db.schema, str(name))}")
        return len(old)


def dimension_names(database: Database) -> list[str]:
    """The reference tables in the schema: its tables that are neither series, quality, partitions nor
    etl's own."""
    rows = database.rows(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = $1 and c.relkind in ('r', 'p') and not c.relispartition",
        (database.schema,),
    )
    skip = {*(s.value for s in Series), QUALITY}
    return sorted(str(n) for (n,) in rows if str(n) not in skip and not str(n).startswith("_etl"))
