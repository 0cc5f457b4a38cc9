"""Apache Iceberg tables through pyiceberg: `etl.raw`, `etl.average`, `etl.candles`, `etl.quality` and
`etl.dimensions_{name}` in a catalog (by default SQLite at `{sink.path}/catalog.db`, warehouse
`{sink.path}`), partitioned by day of the time key (plus identity `object_id` when asked); the catalog
and the table's handle, made and opened here. A commit is one transaction (iceberg_commit.py); data
files are iceberg_files.py's, the upkeep iceberg_upkeep.py's. The overrides of pyiceberg's internals
this needs are in `pyiceberg_compat.py`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pyarrow as pa
import pyarrow.dataset as ds

from etl.errors import ConfigError, StorageError
from etl.sinks.lake import iceberg_commit, iceberg_upkeep
from etl.sinks.lake.common import (
    Change,
    Checkpoint,
    DayFiles,
    LakeTable,
    Policy,
    Replace,
    missing_columns,
    table_lock,
)
from etl.sinks.lake.iceberg_files import FIELD_ID, DataFiles, storage_path
from etl.storage.atomic import Storage
from etl.support import optimistic, redact
from etl.support.optional import require

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.typedef import RecursiveDict, TableVersion

NAMESPACE = "etl"
PREVIOUS_METADATA = 4  # older metadata files the catalog keeps (for a rollback); the rest are deleted
MERGE_MANIFESTS_AT = 4  # manifests merged into one once this many small ones add up
MANIFEST_TARGET = 8 * 2**20
TABLE_PROPERTIES = {
    "write.metadata.previous-versions-max": str(PREVIOUS_METADATA),
    "write.metadata.delete-after-commit.enabled": "true",
    "write.parquet.compression-codec": "zstd",
    # Each commit's append merges the small manifests and drops those left with no live file.
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": str(MERGE_MANIFESTS_AT),
    "commit.manifest.target-size-bytes": str(MANIFEST_TARGET),
    # Whole bounds of `source` (not its first 16 characters): a file's own tell the sources apart.
    "write.metadata.metrics.column.source": "full",
    # A commit that lost a race is planned again by us, on the newer snapshot (its replaced files and its
    # expiry too): pyiceberg's own retry would stage the same expiry again, of snapshots another writer
    # (another source's run) may have expired meanwhile, and fail.
    "commit.retry.num-retries": "0",
}


def catalog(storage: Storage, uri: str | None) -> Catalog:
    """The configured catalog, or SQLite at {sink.path}/catalog.db with the warehouse at {sink.path}."""
    require("pyiceberg", "sink.format iceberg")
    from pyiceberg.catalog import load_catalog
    from pyiceberg.utils.config import Config, merge_config

    from etl.sinks.lake import pyiceberg_compat  # noqa: F401 - a pyiceberg etl is not tested with stops here
    from etl.sinks.lake.sqlite_catalog import SqliteCatalog, sqlite_path

    warehouse = f"file://{os.path.abspath(storage.full(''))}" if storage.local else storage.display()
    props: dict[str, str] = {"warehouse": warehouse}
    if uri is None:
        storage.fs.makedirs(storage.full(""), exist_ok=True)
        props.update(type="sql", uri=f"sqlite:///{os.path.abspath(storage.full('catalog.db'))}")
    elif uri.startswith(("http://", "https://")):
        redact.register(*redact.url_passwords(uri))
        props.update(type="rest", uri=uri)
    else:
        redact.register(*redact.url_passwords(uri))
        # SQLAlchemy 2.1 made psycopg (3) the driver of a bare postgresql://; the lake extra brings
        # psycopg2 (pyiceberg[sql-postgres]), the driver SQLAlchemy 2.0 chose.
        if uri.startswith("postgresql://"):
            uri = "postgresql+psycopg2://" + uri.removeprefix("postgresql://")
        props.update(type="sql", uri=uri)
    if storage.s3:
        props.update(s3_properties(storage.options))
    try:
        found: Catalog
        if props["type"] == "sql" and sqlite_path(props["uri"]) is not None:
            # SQLite through the standard library, as pyiceberg's SQL catalog keeps it (sqlite_catalog.py),
            # with the settings `load_catalog` would add (~/.pyiceberg.yaml, PYICEBERG_CATALOG__ETL__*)
            defaults: RecursiveDict = Config().get_catalog_config("etl") or {}
            settings = merge_config(defaults, {**props})
            found = SqliteCatalog("etl", **{k: v for k, v in settings.items() if isinstance(v, str)})
        else:
            found = load_catalog("etl", **props)
        found.create_namespace_if_not_exists(NAMESPACE)
    except ImportError as exc:  # SQLAlchemy found no driver (DBAPI) for the URL's dialect
        name = exc.name or str(exc)
        install = "'etl[lake]'" if name == "psycopg2" else name
        raise ConfigError(f"sink.catalog needs the database driver {name}: pip install {install}") from None
    except Exception as exc:  # noqa: BLE001 - one line naming the catalog, never its credentials
        reason = redact.redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if type(exc).__name__ in ("ValueError", "ArgumentError", "NoSuchModuleError"):
            raise ConfigError(f"sink.catalog: {reason}") from None  # SQLAlchemy: a malformed URL, no dialect
        raise StorageError(f"cannot open the Iceberg catalog ({props['type']}): {reason}") from None
    return found


def s3_properties(options: dict[str, Any]) -> dict[str, str]:
    """pyiceberg's FileIO settings from the sink's fsspec (s3fs) options. Credentials not given there come
    from the environment (AWS_ACCESS_KEY_ID..., ~/.aws), as for every other S3 access of a run."""
    client = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    region = client.get("region_name")
    if endpoint and not region:
        # Without a region pyiceberg asks AWS where the bucket is (right for AWS itself), which an
        # S3-compatible store (MinIO, Ceph, moto) cannot answer.
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    props = {
        "s3.endpoint": endpoint,
        "s3.region": region,
        "s3.access-key-id": options.get("key"),
        "s3.secret-access-key": options.get("secret"),
        "s3.session-token": options.get("token"),
    }
    return {k: str(v) for k, v in props.items() if v}


def _properties(snapshot: Snapshot) -> dict[str, str]:
    summary = snapshot.summary
    return dict(summary.additional_properties or {}) if summary is not None else {}


def _with_field_ids(schema: pa.Schema) -> pa.Schema:
    """`schema` with a field id on every field, nested ones included (numbered as met): what pyiceberg's
    `pyarrow_to_schema` converts without a name mapping."""
    counter = itertools.count(1)

    def field(f: pa.Field) -> pa.Field:
        return pa.field(
            f.name, kind(f.type), f.nullable, {**(f.metadata or {}), FIELD_ID: str(next(counter)).encode()}
        )

    def kind(t: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(t):
            return pa.struct([field(t.field(i)) for i in range(t.num_fields)])
        if pa.types.is_map(t):
            return pa.map_(field(t.key_field), field(t.item_field))
        if pa.types.is_large_list(t):
            return pa.large_list(field(t.value_field))
        if pa.types.is_list(t):
            return pa.list_(field(t.value_field))
        return t

    return pa.schema([field(f) for f in schema], metadata=schema.metadata)


class IcebergTable(LakeTable):
    kind: ClassVar[str] = "iceberg"

    def __init__(
        self,
        catalog_: Catalog,
        storage: Storage,
        name: str,
        partition_by: tuple[str, ...],
        time_key: str | None,
        policy: Policy,
    ) -> None:
        super().__init__(name, partition_by, time_key, policy)
        self.catalog, self.storage = catalog_, storage
        self.identifier = (NAMESPACE, name.replace("/", "_"))
        self._table: Table | None = (
            None  # the handle: pyiceberg updates its metadata in place with each commit
        )
        self._exists = False
        self.data_files = DataFiles()  # its plans are kept from one commit to the next

    @property
    def uri(self) -> str:
        return f"iceberg:{self.storage.display()}:{'.'.join(self.identifier)}"

    @property
    def label(self) -> str:
        return ".".join(self.identifier)

    def exists(self) -> bool:
        if self._table is None and not self._exists:  # asked once until true: a catalog query each
            self._exists = self.catalog.table_exists(self.identifier)
        return self._table is not None or self._exists

    def _load(self) -> Table:
        try:
            return self.catalog.load_table(self.identifier)
        except Exception as exc:  # noqa: BLE001
            raise StorageError(
                f"cannot open the Iceberg table {self.label}: {str(exc).splitlines()[0]}"
            ) from None

    def _handle(self, schema: pa.Schema | None = None) -> Table:
        """The table, loaded once per run (made first, when `schema` is given and it is missing)."""
        if self._table is None:
            from pyiceberg.exceptions import TableAlreadyExistsError

            if schema is not None and not self.exists():
                try:
                    self._table = self._create(schema)
                except TableAlreadyExistsError:
                    self._table = self._load()
            else:
                self._table = self._load()
            props = self._table.metadata.properties
            if any(props.get(k) != v for k, v in TABLE_PROPERTIES.items()):  # made by an older version
                from pyiceberg.exceptions import CommitFailedException

                # Best effort: another writer setting them at the same moment wins, and the table works
                # without them until then.
                with contextlib.suppress(CommitFailedException), self._table.transaction() as txn:
                    txn.set_properties(TABLE_PROPERTIES)
        if schema is not None:
            self._add_columns(self._table, schema)
        return self._table

    def _add_columns(self, table: Table, schema: pa.Schema) -> None:
        def attempt() -> None:
            missing = missing_columns([f.name for f in table.schema().fields], schema)
            if missing is not None:
                with table.update_schema() as update:
                    update.union_by_name(missing)

        # Lost: another writer (another source's run) changed the table first.
        optimistic.swap(attempt, iceberg_commit.lost_race, again=table.refresh)

    def prepare(self, schema: pa.Schema) -> None:
        with table_lock(self.uri):
            self._handle(schema)

    def write_files(self, rows: pa.Table) -> list[DataFile]:
        """The files pyiceberg's writer makes (the table's schema with its field ids, partition spec,
        Parquet settings and statistics: iceberg_files.DataFiles)."""
        table = self._handle()
        return self.data_files.write(table, rows)

    def holds_none_of(self, replace: Replace) -> bool:
        if not self.exists():
            return True
        with table_lock(self.uri):
            table = self._handle()
        try:
            return next(iceberg_commit.may_hold(table, replace), None) is None
        except FileNotFoundError:  # another writer expired the snapshot it holds: unknown, so no
            return False

    def _create(self, schema: pa.Schema) -> Table:
        """The table, made with its partition spec in one catalog commit (a create transaction would
        recompute and deep-copy the whole metadata at each step, then have it read back)."""
        from pyiceberg.io.pyarrow import pyarrow_to_schema
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import assign_fresh_schema_ids
        from pyiceberg.table import TableProperties
        from pyiceberg.transforms import DayTransform, IdentityTransform, Transform

        number = int(TABLE_PROPERTIES.get("format-version", TableProperties.DEFAULT_FORMAT_VERSION))
        if number not in (1, 2, 3):
            raise ValueError(f"Iceberg format-version {number} is not one pyiceberg writes")
        version = cast("TableVersion", number)
        fields = assign_fresh_schema_ids(pyarrow_to_schema(_with_field_ids(schema), format_version=version))
        partitions: list[tuple[str, Transform[Any, Any], str]] = (
            [(self.time_key, DayTransform(), f"{self.time_key}_day")] if self.time_key else []
        )
        partitions += [(column, IdentityTransform(), column) for column in self.partition_by]
        spec = PartitionSpec(
            *(
                PartitionField(fields.find_field(column).field_id, 1000 + i, transform, name)
                for i, (column, transform, name) in enumerate(partitions)
            )
        )
        return self.catalog.create_table(
            self.identifier, schema=fields, partition_spec=spec, properties=TABLE_PROPERTIES
        )

    # -- committing ----------------------------------------------------------------------------------

    def _commit(self, change: Change) -> list[str]:
        schema = change.rows.schema if change.rows is not None else None
        try:
            return iceberg_commit.commit(
                lambda: self._handle(schema), self.data_files, self.policy, self.time_key, change
            )
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StorageError(
                f"cannot commit to the Iceberg table {self.label}: {str(exc).splitlines()[0]}"
            ) from None

    # -- checkpoints -----------------------------------------------------------------------------------

    def _property(self, table: Table, app: str) -> Checkpoint | None:
        value = table.metadata.properties.get(iceberg_commit.CHECKPOINT_PROPERTY + app)
        return Checkpoint.parse(json.loads(value)) if value else None

    def latest(self, app: str) -> int:
        if not self.exists():
            return 0
        table = self._handle()
        last = self._property(table, app)
        if last is not None:
            return last.version
        found = self.history(app, 0)
        return found[-1].version if found else 0

    def history(self, app: str, after: int) -> list[Checkpoint]:
        if not self.exists():
            return []
        table = self._load()
        found: dict[int, Checkpoint] = {}
        snapshot = table.current_snapshot()
        while snapshot is not None:  # newest first, along the parents, as far as they are kept
            checkpoint = Checkpoint.parse(_properties(snapshot))
            if checkpoint is not None and checkpoint.app == app:
                if checkpoint.version <= after:
                    break
                found.setdefault(checkpoint.version, checkpoint)
            parent = snapshot.parent_snapshot_id
            snapshot = table.snapshot_by_id(parent) if parent is not None else None
        last = self._property(table, app)  # our last commit, even if its snapshot was expired
        if last is not None and last.version > after:
            found.setdefault(last.version, last)
        return [found[v] for v in sorted(found)]

    # -- reading -------------------------------------------------------------------------------------

    def dataset(self) -> ds.Dataset:
        table = self._load()
        tasks = list(table.scan().plan_files())
        if any(task.delete_files for task in tasks):  # merge-on-read deletes of another writer: read them
            return ds.dataset(table.scan().to_arrow())
        schema = table.schema().as_arrow()
        paths = [storage_path(self.storage, t.file.file_path) for t in tasks]
        if not self.storage.local:
            # The files are the snapshot's: a folder listing fsspec cached before pyiceberg (through its
            # own S3 client) wrote some of them would hide them from the reader.
            for folder in {p.rsplit("/", 1)[0] for p in paths}:
                self.storage.fs.invalidate_cache(folder)
        return ds.dataset(
            paths,
            schema=schema,
            format="parquet",
            filesystem=None if self.storage.local else self.storage.fs,
        )

    def _rows_of(self, source: str) -> pa.Table:
        from pyiceberg.expressions import EqualTo

        table = self._handle()
        if table.current_snapshot() is None:
            return pa.table({})
        return table.scan(row_filter=EqualTo("source", source)).to_arrow()

    def _read(self, source: str, params: list[int], start: int, end: int) -> pa.Table:
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan

        assert self.time_key is not None
        where = And(
            EqualTo("source", source),
            In("param_id", set(params)),
            GreaterThanOrEqual(self.time_key, iceberg_commit.iso(start)),
            LessThan(self.time_key, iceberg_commit.iso(end)),
        )
        with self._read_lock:
            if self._reader is None:
                self._reader = self._load()
            table = self._reader
        try:
            return table.scan(row_filter=where).to_arrow()
        except FileNotFoundError:
            # Another writer (another source's run) expired the snapshot read so far: a newer one holds
            # the same rows of this source outside the run's windows.
            with self._read_lock:
                if self._reader is table:
                    self._reader = self._load()
                table = self._reader
            return table.scan(row_filter=where).to_arrow()

    # -- upkeep --------------------------------------------------------------------------------------

    def day_files(self, source: str | None = None) -> list[DayFiles]:
        return iceberg_upkeep.day_files(self._handle(), source) if self.time_key else []

    def _compact(self, days: list[DayFiles], source: str) -> int:
        assert self.time_key is not None
        return iceberg_upkeep.compact(
            self._handle(), self.data_files, self.policy, self.time_key, days, source
        )

    def _refresh(self) -> None:
        if self._table is not None:
            self._table.refresh()

    def _expire(self, retention_ms: int | None, versions: int, now: bool = False) -> int:
        return iceberg_upkeep.expire(self._handle(), retention_ms, versions, self.policy.slack, now)

    def _sweep(self, retention_ms: int) -> int:
        return iceberg_upkeep.sweep(self._handle(), self.storage, retention_ms)
