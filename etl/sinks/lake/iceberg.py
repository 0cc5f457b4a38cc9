"""Apache Iceberg tables through pyiceberg: `etl.raw`, `etl.average`, `etl.candles`, `etl.quality` and
`etl.dimensions_{name}` in a catalog (by default SQLite at `{sink.path}/catalog.db`, warehouse
`{sink.path}`), partitioned by day of the time key (plus identity `object_id` when asked).

A commit is one transaction made visible by one swap of the table's metadata pointer in the catalog
(which refuses a swap from a stale pointer: optimistic concurrency), through pyiceberg's snapshot API
(`Transaction.update_snapshot`). When no stored file's partition and statistics overlap the group's
windows it is one append snapshot; otherwise the files that hold replaced rows are rewritten without
them (copy-on-write, only those files: the scan plan prunes the rest), an overwrite snapshot removes
them and an append snapshot then adds their rewrites and the new files. The last snapshot's summary
carries the checkpoint, and the same transaction sets the table property `etl.checkpoint.{app}` to it:
properties outlive expired snapshots, so recovery finds our last commit whatever expiry removed.

Metadata does not grow with history: the same transaction expires snapshots beyond the newest
`sink.versions` (or older than the retention) once enough add up, and their manifest lists and
manifests are deleted; the append merges small manifests once MERGE_MANIFESTS_AT add up and drops those
left with no live file (table properties `commit.manifest-merge.*`); the catalog keeps at most
PREVIOUS_METADATA older metadata files (`write.metadata.previous-versions-max`, deleted after commit).
The overrides of pyiceberg's internals this needs are in `pyiceberg_compat.py`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import reduce
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pyarrow as pa
import pyarrow.dataset as ds

from etl.errors import ConfigError, StorageError
from etl.sinks.lake.common import (
    CONFLICT_ATTEMPTS,
    SMALL_FILE,
    Checkpoint,
    DayFiles,
    LakeTable,
    Policy,
    Replace,
    missing_columns,
    only_of,
    table_lock,
    to_merge,
)
from etl.storage.atomic import Storage
from etl.support import redact
from etl.support.optional import require

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionKey, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.typedef import RecursiveDict, TableVersion

NAMESPACE = "etl"
CHECKPOINT_PROPERTY = "etl.checkpoint."  # + app: our last commit's checkpoint, kept through expiry
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
FIELD_ID = b"PARQUET:field_id"


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


def expression(replace: Replace) -> BooleanExpression:
    """pyiceberg's row filter, of the replace's source alone (its scan plan then skips every other
    source's files, and a concurrent commit of another source is no conflict)."""
    from pyiceberg.expressions import AlwaysFalse, And, EqualTo, GreaterThanOrEqual, In, LessThan, Or

    source = EqualTo("source", replace.source)
    if replace.groups is None:
        return source
    key = replace.time_key
    parts = [
        And(GreaterThanOrEqual(key, _iso(a)), LessThan(key, _iso(b)), In("param_id", set(ids)))
        for a, b, ids in replace.groups
    ]
    return And(source, reduce(Or, parts)) if parts else AlwaysFalse()


def _may_hold(table: Table, replace: Replace) -> Iterator[FileScanTask]:
    """The scan tasks of the current snapshot's files that may hold a row `replace` removes: pyiceberg's
    plan prunes by partition and statistics, without reading a data file."""
    if table.current_snapshot() is None:
        return iter(())
    return iter(table.scan(row_filter=expression(replace)).plan_files())


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="microseconds")


def _properties(snapshot: Snapshot) -> dict[str, str]:
    summary = snapshot.summary
    return dict(summary.additional_properties or {}) if summary is not None else {}


def _stage(
    txn: Transaction,
    io: FileIO,
    removed: Sequence[DataFile],
    added: Sequence[DataFile],
    properties: dict[str, str],
    replaces: BooleanExpression | None = None,
) -> int:
    """Stage a commit's snapshots in `txn`: an overwrite that removes `removed` (the files holding rows
    `replaces` matches), then an append that adds `added` (what the removed files keep among them) and
    merges the manifests; the last one carries `properties`. Both become visible with the transaction's
    one swap; how many were staged."""
    from etl.sinks.lake.pyiceberg_compat import overwrite

    staged = 0
    if removed:
        with overwrite(txn, io, {} if added else properties) as producer:
            if replaces is not None:  # the overwrite's conflict filter
                producer.delete_by_predicate(replaces)
            for data_file in removed:
                producer.delete_data_file(data_file)
        staged += 1
    if added or not removed:
        with txn.update_snapshot(snapshot_properties=properties).merge_append() as append:
            for data_file in added:
                append.append_data_file(data_file)
        staged += 1
    return staged


def same_schema(metadata: TableMetadata, schema: pa.Schema) -> bool:
    """Is the arrow schema the table's own: the same columns in the same order, of the same Iceberg types
    and nullability (then the rows fit without pyiceberg's check, which renders a rich text table of
    every field each time)?"""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    table_schema = metadata.schema()
    try:
        given = pyarrow_to_schema(
            schema, name_mapping=table_schema.name_mapping, format_version=metadata.format_version
        )
    except ValueError:
        return False
    return bool(given.as_struct() == table_schema.as_struct())


def _parquet_options(properties: dict[str, str]) -> dict[str, Any]:
    """pyarrow's Parquet writer settings from the table's `write.parquet.*` properties, as pyiceberg's
    writer reads them."""
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.properties import property_as_int

    def number(name: str, default: int | None) -> int | None:
        value = property_as_int(properties, name, default)
        return None if value is None else int(value)

    codec = properties.get(TableProperties.PARQUET_COMPRESSION, TableProperties.PARQUET_COMPRESSION_DEFAULT)
    return {
        "compression": "none" if codec == "uncompressed" else codec,
        "compression_level": number(
            TableProperties.PARQUET_COMPRESSION_LEVEL, TableProperties.PARQUET_COMPRESSION_LEVEL_DEFAULT
        ),
        "data_page_size": number(
            TableProperties.PARQUET_PAGE_SIZE_BYTES, TableProperties.PARQUET_PAGE_SIZE_BYTES_DEFAULT
        ),
        "dictionary_pagesize_limit": number(
            TableProperties.PARQUET_DICT_SIZE_BYTES, TableProperties.PARQUET_DICT_SIZE_BYTES_DEFAULT
        ),
        "write_batch_size": number(
            TableProperties.PARQUET_PAGE_ROW_LIMIT, TableProperties.PARQUET_PAGE_ROW_LIMIT_DEFAULT
        ),
    }


def _target_size(properties: dict[str, str]) -> int:
    """`write.target-file-size-bytes`: rows beyond it (in memory) are split into several files."""
    from pyiceberg.table import TableProperties
    from pyiceberg.utils.properties import property_as_int

    size = property_as_int(
        properties,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
    )
    return int(size or TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)


def _partitions(
    spec: PartitionSpec, table_schema: Schema, rows: pa.Table
) -> list[tuple[PartitionKey | None, pa.Table]]:
    """(partition key, rows) per partition of the spec; no copy when there is one (a slab's day)."""
    import pyarrow.compute as pc
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

    if spec.is_unpartitioned():
        return [(None, rows)]
    keys = {}
    for i, field in enumerate(spec.fields):
        source = table_schema.find_field(field.source_id)
        column = rows.column(table_schema.find_column_name(field.source_id))
        keys[f"_partition_{i}"] = field.transform.pyarrow_transform(source.field_type)(column)
    values = pa.table(keys)
    unique = values.group_by(list(keys)).aggregate([]).to_pylist()
    out: list[tuple[PartitionKey | None, pa.Table]] = []
    for combination in unique:
        key = PartitionKey(
            field_values=[
                PartitionFieldValue(field=field, value=combination[f"_partition_{i}"])
                for i, field in enumerate(spec.fields)
            ],
            partition_spec=spec,
            schema=table_schema,
        )
        if len(unique) == 1:
            out.append((key, rows))
            continue
        mask = reduce(
            pc.and_kleene,
            [
                pc.is_null(values.column(name))
                if value is None
                else pc.equal(values.column(name), pa.scalar(value, values.column(name).type))
                for name, value in combination.items()
            ],
        )
        out.append((key, rows.filter(mask)))
    return out


def _pyiceberg_files(metadata: TableMetadata, io: FileIO, rows: pa.Table) -> list[DataFile]:
    """The rows as data files written by pyiceberg's writer (`write_file`), a file per partition and per
    `write.target-file-size-bytes` of rows: for rows of another schema than the table's own, or too many
    for one file."""
    from pyiceberg.io.pyarrow import bin_pack_arrow_table, pyarrow_to_schema, write_file
    from pyiceberg.table import WriteTask

    table_schema = metadata.schema()
    schema = pyarrow_to_schema(
        rows.schema, name_mapping=table_schema.name_mapping, format_version=metadata.format_version
    )
    write_uuid, counter = uuid.uuid4(), itertools.count()
    tasks = (
        WriteTask(write_uuid, next(counter), schema, batches, partition_key=key)
        for key, part in _partitions(metadata.spec(), table_schema, rows)
        for batches in bin_pack_arrow_table(part, _target_size(metadata.properties))
    )
    return list(write_file(io, metadata, tasks))


def check_fits(metadata: TableMetadata, schema: pa.Schema) -> None:
    """Raise ValueError unless rows of `schema` fit the table: each column one of the table's, of its type
    or of one that promotes to it, and none of its required columns missing or nullable."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import promote
    from pyiceberg.types import PrimitiveType

    table_schema = metadata.schema()
    extra = sorted(set(schema.names) - {f.name for f in table_schema.fields})
    if extra:
        raise ValueError(f"the rows have columns the table lacks: {', '.join(extra)}")
    given = pyarrow_to_schema(
        schema, name_mapping=table_schema.name_mapping, format_version=metadata.format_version
    )
    for field in table_schema.fields:
        found = next((f for f in given.fields if f.field_id == field.field_id), None)
        if found is None or found.field_type == field.field_type:
            if field.required and (found is None or found.optional):
                raise ValueError(f"column {field.name} is required")
            continue
        if not (isinstance(found.field_type, PrimitiveType) and isinstance(field.field_type, PrimitiveType)):
            raise ValueError(f"column {field.name}: {found.field_type}, the table has {field.field_type}")
        try:
            promote(found.field_type, field.field_type)
        except ResolveError as exc:
            raise ValueError(f"column {field.name}: {exc}") from None


class _Files:
    """How rows of one arrow schema become data files of one table schema and partition spec: what
    pyiceberg's writer (`write_file`) works out again for every file (the rows' schema converted, checked
    and projected, its configuration read, the statistics plan made: several milliseconds a file) is
    worked out once. The files hold the same: the table's columns with their field ids, pyiceberg's
    Parquet settings (but for dictionaries) and statistics, its file names and locations. Only rows whose
    schema is the table's own, flat, take this path (`of` says None otherwise)."""

    def __init__(self, metadata: TableMetadata, schema: pa.Schema) -> None:
        from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping
        from pyiceberg.table import TableProperties
        from pyiceberg.table.locations import load_location_provider
        from pyiceberg.utils.properties import property_as_int

        table_schema, properties = metadata.schema(), metadata.properties
        self.spec, self.table_schema, self.spec_id = metadata.spec(), table_schema, metadata.default_spec_id
        self.schema = pa.schema(
            [
                f.with_metadata({FIELD_ID: str(table_schema.find_field(f.name).field_id).encode()})
                for f in schema
            ]
        )
        self.statistics = compute_statistics_plan(table_schema, properties)
        self.columns = parquet_path_to_id_mapping(table_schema)
        # pyiceberg's settings, but dictionaries only where they pay off, as in etl's Parquet datasets
        # (etl/sinks/formats.py): on timestamps and measured values the dictionary's hash table grows
        # with every distinct value, for larger files that take longer to write.
        keyed = [
            f.name for f in schema if not (pa.types.is_floating(f.type) or pa.types.is_timestamp(f.type))
        ]
        self.options = {**_parquet_options(properties), "use_dictionary": keyed}
        self.row_group = property_as_int(
            properties,
            TableProperties.PARQUET_ROW_GROUP_LIMIT,
            TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT,
        )
        # Rows beyond this (in memory) are split into several files by pyiceberg's writer: left to it.
        self.target = _target_size(properties)
        self.locations = load_location_provider(metadata.location, properties)

    @staticmethod
    def of(metadata: TableMetadata, schema: pa.Schema) -> _Files | None:
        """The plan, when `schema` is the table's (`same_schema`), flat, and every name one Avro
        accepts (pyiceberg would rename it in files)."""
        from pyiceberg.schema import sanitize_column_names

        table_schema = metadata.schema()
        flat = not any(pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type) for f in schema)
        if not flat or not same_schema(metadata, schema):
            return None
        return _Files(metadata, schema) if sanitize_column_names(table_schema) == table_schema else None

    def write(self, rows: pa.Table, io: FileIO) -> list[DataFile]:
        from pyiceberg.utils.concurrent import ExecutorFactory

        write_uuid = uuid.uuid4()
        parts = _partitions(
            self.spec, self.table_schema, pa.Table.from_arrays(rows.columns, schema=self.schema)
        )
        tasks = [(f"00000-{i}-{write_uuid}.parquet", key, part) for i, (key, part) in enumerate(parts)]
        if len(tasks) == 1:
            return [self._file(io, *tasks[0])]
        return list(ExecutorFactory.get_or_create().map(lambda task: self._file(io, *task), tasks))

    def _file(self, io: FileIO, name: str, key: PartitionKey | None, rows: pa.Table) -> DataFile:
        import pyarrow.parquet as pq
        from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        path = self.locations.new_data_location(data_file_name=name, partition_key=key)
        output = io.new_output(path)
        with output.create(overwrite=True) as stream:
            writer = pq.ParquetWriter(
                stream, schema=self.schema, store_decimal_as_integer=True, **self.options
            )
            writer.write(rows, row_group_size=self.row_group)
            writer.close()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=writer.writer.metadata,
            stats_columns=self.statistics,
            parquet_column_mapping=self.columns,
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=key.partition if key is not None else Record(),
            file_size_in_bytes=len(output),
            sort_order_id=None,
            spec_id=self.spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )


def _partition(file: DataFile) -> tuple[Any, ...]:
    """A data file's partition values, in the spec's order."""
    record = file.partition
    return tuple(record[i] for i in range(len(record)))


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
        self._plans: dict[tuple[Any, ...], _Files | None] = {}  # per (schema, spec, settings, rows' schema)

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
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(CONFLICT_ATTEMPTS):
            missing = missing_columns([f.name for f in table.schema().fields], schema)
            if missing is None:
                return
            try:
                with table.update_schema() as update:
                    update.union_by_name(missing)
                return
            except CommitFailedException:
                if attempt == CONFLICT_ATTEMPTS - 1:
                    raise
                table.refresh()  # another writer (another source's run) changed the table first

    def prepare(self, schema: pa.Schema) -> None:
        with table_lock(self.uri):
            self._handle(schema)

    def write_files(self, rows: pa.Table) -> list[DataFile]:
        """The files pyiceberg's writer makes (the table's schema with its field ids, partition spec,
        Parquet settings and statistics: `_Files`, or pyiceberg's own writer for rows of another schema)."""
        table = self._handle()
        return self._write(table, rows)

    def holds_none_of(self, replace: Replace) -> bool:
        if not self.exists():
            return True
        with table_lock(self.uri):
            table = self._handle()
        try:
            return next(_may_hold(table, replace), None) is None
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

    def _commit(
        self,
        rows: pa.Table | None,
        files: Sequence[DataFile],
        replace: Replace | None,
        checkpoint: Checkpoint | None,
        ready: Callable[[], object] | None = None,
    ) -> list[str]:
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        try:
            for attempt in range(CONFLICT_ATTEMPTS):
                table = self._handle(rows.schema if rows is not None else None)
                try:
                    return self._commit_once(table, rows, files, replace, checkpoint, ready)
                except (CommitFailedException, ValidationException, FileNotFoundError):
                    if attempt == CONFLICT_ATTEMPTS - 1:
                        raise
                    # Another writer got in between (its expiry may have deleted the manifests of the
                    # snapshot we planned on): plan again on its snapshot.
                    table.refresh()
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StorageError(
                f"cannot commit to the Iceberg table {self.label}: {str(exc).splitlines()[0]}"
            ) from None
        return []

    def _plan(self, table: Table, schema: pa.Schema) -> _Files | None:
        """How rows of `schema` are written into the table (None: by pyiceberg's writer), once checked
        that they fit it."""
        metadata = table.metadata
        settings = tuple(sorted((k, v) for k, v in metadata.properties.items() if k.startswith("write.")))
        key = (metadata.table_uuid, metadata.current_schema_id, metadata.default_spec_id, settings, schema)
        if key not in self._plans:
            plan = _Files.of(metadata, schema)
            if plan is None and not same_schema(metadata, schema):
                check_fits(metadata, schema)
            self._plans[key] = plan
        return self._plans[key]

    def _write(self, table: Table, rows: pa.Table) -> list[DataFile]:
        plan = self._plan(table, rows.schema)
        if plan is not None and rows.nbytes <= plan.target:
            return plan.write(rows, table.io)
        return _pyiceberg_files(table.metadata, table.io, rows)

    def _commit_once(
        self,
        table: Table,
        rows: pa.Table | None,
        files: Sequence[DataFile],
        replace: Replace | None,
        checkpoint: Checkpoint | None,
        ready: Callable[[], object] | None = None,
    ) -> list[str]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan

        from etl.sinks.lake.pyiceberg_compat import transaction

        written: list[DataFile] = []
        try:
            new = list(files)
            if rows is not None and rows.num_rows:
                self._plan(table, rows.schema)  # rows that do not fit fail here, before any file is read
            removed: list[DataFile] = []
            kept: list[pa.Table] = []
            kept_bytes = 0
            if replace is not None:
                schema = table.metadata.schema()
                for task in _may_hold(table, replace):
                    old = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table([task])
                    hit = replace.matches(old)
                    if not hit.any():
                        continue  # its statistics overlap, its rows do not
                    removed.append(task.file)
                    if not hit.all():
                        kept.append(old.filter(pa.array(~hit)))
                        kept_bytes += task.file.file_size_in_bytes
            if rows is not None and rows.num_rows and kept and kept_bytes < SMALL_FILE:
                # Small rewrites go into the new rows' files: an hourly run's partition keeps one file
                # rather than gaining one per run (large ones are rewritten apart: never a day's rows).
                merged = pa.concat_tables(
                    [rows, *(k.select(rows.column_names).cast(rows.schema) for k in kept)]
                )
                if self.time_key:
                    merged = merged.sort_by([("param_id", "ascending"), (self.time_key, "ascending")])
                rows, kept = merged, []
            if rows is not None and rows.num_rows:
                written += self._write(table, rows)
            if kept:
                written += self._write(table, pa.concat_tables(kept))
            new += written
            if not (new or removed or checkpoint):
                return []
            properties = checkpoint.properties() if checkpoint else {}
            txn = transaction(table)
            replaces = expression(replace) if replace is not None else None
            staged = _stage(txn, table.io, removed, new, properties, replaces)
            if checkpoint is not None:
                txn.set_properties({CHECKPOINT_PROPERTY + checkpoint.app: json.dumps(properties)})
            expired = self._stage_expiry(table, txn, staged, self.policy.retention_ms, self.policy.versions)
            if ready is not None:
                ready()
            txn.commit_transaction()
        except BaseException:
            for data_file in written:  # never referenced: gone with the failed commit
                with contextlib.suppress(Exception):
                    table.io.delete(data_file.file_path)
            raise
        self._forget(table, expired)
        return [f.file_path for f in new]

    def _stage_expiry(
        self,
        table: Table,
        txn: Transaction,
        staged: int,
        retention_ms: int | None,
        versions: int,
        force: bool = False,
    ) -> list[Snapshot]:
        """Snapshots beyond the newest `versions` or older than the retention, expired in `txn` (a
        transaction of `table` that stages `staged` snapshots) once `policy.slack` of them add up (the
        cleanup that follows reads every kept snapshot's list)."""
        from pyiceberg.table.update.snapshot import ExpireSnapshots

        before = table.metadata  # without this transaction's changes: cheap to read
        cutoff = None if retention_ms is None else time.time() * 1000 - retention_ms
        oldest = min((s.timestamp_ms for s in before.snapshots), default=None)
        young = cutoff is None or oldest is None or oldest >= cutoff
        if not force and young and len(before.snapshots) + staged < versions + self.policy.slack:
            return []  # nothing past `versions` or the retention yet
        metadata = txn.table_metadata
        current = metadata.current_snapshot_id
        ordered = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
        newest = {s.snapshot_id for s in ordered[-versions:]}
        old = [
            s
            for s in ordered
            if s.snapshot_id != current
            and (s.snapshot_id not in newest or (cutoff is not None and s.timestamp_ms < cutoff))
        ]
        if not old or (len(old) < self.policy.slack and not force):
            return []
        ExpireSnapshots(txn).by_ids([s.snapshot_id for s in old]).commit()
        return old

    def _forget(self, table: Table, expired: list[Snapshot]) -> None:
        """The manifest lists of expired snapshots, and the manifests no kept snapshot lists."""
        if not expired:
            return
        io = table.io
        kept = {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(io)}
        for snapshot in expired:
            with contextlib.suppress(Exception):
                for manifest in snapshot.manifests(io):
                    if manifest.manifest_path not in kept:
                        io.delete(manifest.manifest_path)
                io.delete(snapshot.manifest_list)

    # -- checkpoints -----------------------------------------------------------------------------------

    def _property(self, table: Table, app: str) -> Checkpoint | None:
        value = table.metadata.properties.get(CHECKPOINT_PROPERTY + app)
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

    def _path(self, uri: str) -> str:
        return uri.removeprefix("file://") if self.storage.local else uri.split("://", 1)[1]

    def dataset(self) -> ds.Dataset:
        table = self._load()
        tasks = list(table.scan().plan_files())
        if any(task.delete_files for task in tasks):  # merge-on-read deletes of another writer: read them
            return ds.dataset(table.scan().to_arrow())
        schema = table.schema().as_arrow()
        paths = [self._path(t.file.file_path) for t in tasks]
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
            GreaterThanOrEqual(self.time_key, _iso(start)),
            LessThan(self.time_key, _iso(end)),
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

    def _tasks(self, table: Table) -> list[FileScanTask]:
        return list(table.scan().plan_files()) if table.current_snapshot() is not None else []

    def _of(self, table: Table, source: str | None) -> Callable[[DataFile], bool]:
        """Whether a data file counts for `source`: every file without one; with one, the files whose
        bounds say they hold that source's rows alone."""
        if source is None:
            return lambda data_file: True
        field = table.schema().find_field("source").field_id

        def text(bounds: dict[int, bytes] | None) -> str | None:
            value = (bounds or {}).get(field)
            return value.decode("utf-8", "replace") if value is not None else None

        return lambda data_file: only_of(source, text(data_file.lower_bounds), text(data_file.upper_bounds))

    def day_files(self, source: str | None = None) -> list[DayFiles]:
        if not self.time_key:
            return []
        table = self._handle()
        counted = self._of(table, source)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for task in self._tasks(table):
            if not counted(task.file):
                continue
            key = _partition(task.file)
            groups.setdefault(key, []).append(int(task.file.file_size_in_bytes))
        out = []
        for key, sizes in groups.items():
            small = [s for s in sizes if s < SMALL_FILE]
            out.append(DayFiles(int(key[0]), tuple(key[1:]), len(sizes), len(small), sum(small)))
        return out

    def _compact(self, days: list[DayFiles], source: str) -> int:
        """Each partition's small files of the source rewritten into as few as the target size allows,
        all in one commit (pyiceberg has no rewrite action; the rows of one partition are held)."""
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan

        from etl.sinks.lake.pyiceberg_compat import transaction

        table = self._handle()
        counted = self._of(table, source)
        wanted = {(d.day, *d.key) for d in days}
        groups: dict[tuple[Any, ...], list[FileScanTask]] = {}
        for task in self._tasks(table):
            key = _partition(task.file)
            if key in wanted and task.file.file_size_in_bytes < SMALL_FILE and counted(task.file):
                groups.setdefault(key, []).append(task)
        schema = table.metadata.schema()
        removed: list[DataFile] = []
        written: list[DataFile] = []
        try:
            for tasks in groups.values():
                picked = [tasks[i] for i in to_merge([t.file.file_size_in_bytes for t in tasks])]
                if not picked:
                    continue
                rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(picked)
                assert self.time_key is not None
                rows = rows.sort_by([("param_id", "ascending"), (self.time_key, "ascending")])
                written += self._write(table, rows)
                removed += [t.file for t in picked]
            if not removed:
                return 0
            txn = transaction(table)
            staged = _stage(txn, table.io, removed, written, {})
            expired = self._stage_expiry(table, txn, staged, self.policy.retention_ms, self.policy.versions)
            txn.commit_transaction()
        except BaseException:
            for data_file in written:
                with contextlib.suppress(Exception):
                    table.io.delete(data_file.file_path)
            raise
        self._forget(table, expired)
        return len(removed)

    def _refresh(self) -> None:
        if self._table is not None:
            self._table.refresh()

    def _expire(self, retention_ms: int | None, versions: int, now: bool = False) -> int:
        from etl.sinks.lake.pyiceberg_compat import transaction

        table = self._handle()
        if retention_ms is None and len(table.metadata.snapshots) <= versions:
            return 0
        txn = transaction(table)
        expired = self._stage_expiry(table, txn, 0, retention_ms, versions, force=now)
        if not expired:
            return 0
        txn.commit_transaction()
        self._forget(table, expired)
        return len(expired)

    def _sweep(self, retention_ms: int) -> int:
        """Files under the table's location that no kept snapshot or metadata file references (removed
        data files, a killed writer's), older than the retention."""
        table = self._handle()
        table.refresh()
        keep = {self._path(p) for p in table.inspect.all_files().column("file_path").to_pylist()}
        io = table.io
        for snapshot in table.metadata.snapshots:
            keep.add(self._path(snapshot.manifest_list))
            keep.update(self._path(m.manifest_path) for m in snapshot.manifests(io))
        keep.add(self._path(table.metadata_location))
        keep.update(self._path(entry.metadata_file) for entry in table.metadata.metadata_log)
        cutoff = time.time() * 1000 - retention_ms
        removed = 0
        root = self._path(table.location())
        self.storage.fs.invalidate_cache(root)
        for path, info in self.storage.fs.find(root, detail=True).items():
            modified = info.get("mtime") or info.get("LastModified")
            stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
            if (
                path not in keep
                and path.endswith((".parquet", ".avro", ".metadata.json"))
                and stamp * 1000 < cutoff
            ):
                with contextlib.suppress(FileNotFoundError):
                    self.storage.fs.rm_file(path)
                    removed += 1
        return removed
