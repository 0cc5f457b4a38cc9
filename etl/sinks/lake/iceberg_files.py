"""Iceberg data files as etl writes them: the rows of a commit, a Dask worker's or a compaction's, a file
per partition, with the table's field ids, pyiceberg's Parquet settings and statistics (`DataFiles`).
No reader sees them until a commit names them (iceberg_commit.py).
"""

from __future__ import annotations

import itertools
import uuid
from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from etl.storage.atomic import Storage

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionKey, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

FIELD_ID = b"PARQUET:field_id"


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


def partition_of(file: DataFile) -> tuple[Any, ...]:
    """A data file's partition values, in the spec's order."""
    record = file.partition
    return tuple(record[i] for i in range(len(record)))


class DataFiles:
    """How one table's rows become data files: the plan of each (table schema, spec, settings, rows'
    schema) worked out once (`_Files`), pyiceberg's own writer where no plan fits."""

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], _Files | None] = {}

    def plan(self, table: Table, schema: pa.Schema) -> _Files | None:
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

    def write(self, table: Table, rows: pa.Table) -> list[DataFile]:
        plan = self.plan(table, rows.schema)
        if plan is not None and rows.nbytes <= plan.target:
            return plan.write(rows, table.io)
        return _pyiceberg_files(table.metadata, table.io, rows)


def storage_path(storage: Storage, uri: str) -> str:
    """A file's URI (as the table's metadata names it) as a path of the storage's file system."""
    return uri.removeprefix("file://") if storage.local else uri.split("://", 1)[1]
