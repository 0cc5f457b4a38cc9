"""File formats of the datasets: whole tables to bytes and back (small files), and streams of batches
from and to local files (data files, which are never held whole)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import IO, Protocol, TypedDict, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from etl.errors import DataError

ROW_GROUP_ROWS = 1 << 16  # rows per written row group: a writer holds at most this many,
ROW_GROUP_BYTES = 8 << 20  # or this many bytes (wide reference records: 65,536 of them are tens of MB)
READ_BATCH_ROWS = 1 << 16


class BatchWriter(Protocol):
    def write(self, table: pa.Table) -> None: ...

    def close(self) -> None: ...


class FileFormat(Protocol):
    extension: str

    def encode(self, table: pa.Table) -> bytes: ...

    def decode(self, data: bytes, schema: pa.Schema, where: str) -> pa.Table: ...

    def batches(
        self, handle: IO[bytes], schema: pa.Schema, where: str, param_ids: np.ndarray | None = None
    ) -> Iterator[pa.Table]:
        """The file's rows a batch at a time; with `param_ids`, a format that keeps statistics may skip the
        parts that hold none of them (the caller still filters the rows)."""
        ...

    def writer(self, path: str, schema: pa.Schema, group_bytes: int = ROW_GROUP_BYTES) -> BatchWriter: ...


def _conform(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """The file's columns in the schema's order and types; a column the file lacks (written by an older
    version) comes back null, for the caller to fill."""
    try:
        names = table.column_names
        columns = [
            pa.nulls(table.num_rows, f.type)
            if f.name not in names
            else column
            if (column := table.column(f.name)).type == f.type
            else column.cast(f.type)
            for f in schema
        ]
        return pa.Table.from_arrays(columns, schema=schema)
    except pa.ArrowException as exc:
        raise DataError(f"cannot read existing file {where}: {exc}") from None


class _Buffered:
    """Collects small tables into row groups of about ROW_GROUP_ROWS or ROW_GROUP_BYTES before handing
    them on."""

    def __init__(self, flush: Callable[[pa.Table], None], group_bytes: int) -> None:
        self._flush, self._group_bytes = flush, group_bytes
        self._parts: list[pa.Table] = []
        self._rows = self._bytes = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._parts.append(table)
            self._rows += table.num_rows
            self._bytes += table.nbytes  # of the rows in view (a slice shares a larger buffer)
            if self._rows >= ROW_GROUP_ROWS or self._bytes >= self._group_bytes:
                self._drain()

    def _drain(self) -> None:
        if self._parts:
            self._flush(pa.concat_tables(self._parts))
            self._parts, self._rows, self._bytes = [], 0, 0


class _ParquetOptions(TypedDict):
    compression: str | None
    use_dictionary: list[str]


class ParquetFormat:
    extension = ".parquet"

    def __init__(self, compression: str = "zstd") -> None:
        self.compression = None if compression == "none" else compression

    def _options(self, schema: pa.Schema) -> _ParquetOptions:
        # Dictionaries pay off on few-valued columns (ids, kinds, names), not on timestamps and
        # measured values: there the dictionary grows with every distinct value, and costs time and bytes.
        keyed = [
            f.name for f in schema if not (pa.types.is_floating(f.type) or pa.types.is_timestamp(f.type))
        ]
        return {"compression": self.compression, "use_dictionary": keyed}

    def encode(self, table: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, **self._options(table.schema))
        return cast(bytes, sink.getvalue().to_pybytes())

    def decode(self, data: bytes, schema: pa.Schema, where: str) -> pa.Table:
        try:
            table = pq.read_table(pa.BufferReader(data))
        except pa.ArrowException as exc:
            raise DataError(f"cannot read existing file {where}: {exc}") from None
        return _conform(table, schema, where)

    def batches(
        self, handle: IO[bytes], schema: pa.Schema, where: str, param_ids: np.ndarray | None = None
    ) -> Iterator[pa.Table]:
        try:
            reader = pq.ParquetFile(handle)
            groups = None if param_ids is None else _row_groups(reader, param_ids)
            for batch in reader.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=groups):
                yield _conform(pa.Table.from_batches([batch]), schema, where)
        except pa.ArrowException as exc:
            raise DataError(f"cannot read existing file {where}: {exc}") from None

    def writer(self, path: str, schema: pa.Schema, group_bytes: int = ROW_GROUP_BYTES) -> BatchWriter:
        return _ParquetWriter(path, schema, self._options(schema), group_bytes)


def _row_groups(reader: pq.ParquetFile, param_ids: np.ndarray) -> list[int]:
    """The row groups whose param_id statistics may hold one of `param_ids` (all of them without
    statistics): a file is sorted by parameter, so a few parameters' rows are in a few row groups."""
    ids = np.unique(param_ids)
    names = reader.metadata.schema.names
    column = names.index("param_id") if "param_id" in names else None
    keep = []
    for i in range(reader.metadata.num_row_groups):
        stats = None if column is None else reader.metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            keep.append(i)
            continue
        at = int(np.searchsorted(ids, stats.min))
        if at < len(ids) and ids[at] <= stats.max:
            keep.append(i)
    return keep


class _ParquetWriter(_Buffered):
    def __init__(self, path: str, schema: pa.Schema, options: _ParquetOptions, group_bytes: int) -> None:
        self._writer = pq.ParquetWriter(path, schema, **options)
        super().__init__(
            lambda table: self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS), group_bytes
        )

    def close(self) -> None:
        self._drain()
        self._writer.close()


def _csv_plain(table: pa.Table) -> pa.Table:
    """Timestamps as ISO 8601 UTC with milliseconds (2026-11-01T00:00:00.000Z)."""
    columns = [
        pc.strftime(col, format="%Y-%m-%dT%H:%M:%SZ") if pa.types.is_timestamp(col.type) else col
        for col in table.columns
    ]
    return pa.table(columns, names=table.column_names)


def _csv_rows(table: pa.Table, out: IO[bytes]) -> None:
    plain = _csv_plain(table)
    # Unquoted when nothing needs quotes (series); quoted strings otherwise (JSON in dimensions).
    try:
        buffer = io.BytesIO()
        pcsv.write_csv(plain, buffer, pcsv.WriteOptions(include_header=False, quoting_style="none"))
    except pa.ArrowInvalid:
        buffer = io.BytesIO()
        pcsv.write_csv(plain, buffer, pcsv.WriteOptions(include_header=False, quoting_style="needed"))
    out.write(buffer.getvalue())


def _csv_header(names: list[str]) -> bytes:
    return (",".join(names) + "\n").encode()  # pyarrow would quote every name


class CsvFormat:
    """Header row; timestamps as ISO 8601 UTC with milliseconds."""

    extension = ".csv"

    def encode(self, table: pa.Table) -> bytes:
        out = io.BytesIO()
        out.write(_csv_header(table.column_names))
        _csv_rows(table, out)
        return out.getvalue()

    def _convert(self, schema: pa.Schema) -> pcsv.ConvertOptions:
        return pcsv.ConvertOptions(column_types=dict(zip(schema.names, schema.types, strict=True)))

    def decode(self, data: bytes, schema: pa.Schema, where: str) -> pa.Table:
        try:
            table = pcsv.read_csv(pa.BufferReader(data), convert_options=self._convert(schema))
        except pa.ArrowException as exc:
            raise DataError(f"cannot read existing file {where}: {exc}") from None
        return _conform(table, schema, where)

    def batches(
        self, handle: IO[bytes], schema: pa.Schema, where: str, param_ids: np.ndarray | None = None
    ) -> Iterator[pa.Table]:
        try:
            reader = pcsv.open_csv(
                handle,
                read_options=pcsv.ReadOptions(block_size=1 << 22),
                convert_options=self._convert(schema),
            )
            for batch in reader:
                yield _conform(pa.Table.from_batches([batch]), schema, where)
        except pa.ArrowException as exc:
            raise DataError(f"cannot read existing file {where}: {exc}") from None

    def writer(self, path: str, schema: pa.Schema, group_bytes: int = ROW_GROUP_BYTES) -> BatchWriter:
        return _CsvWriter(path, schema, group_bytes)


class _CsvWriter(_Buffered):
    def __init__(self, path: str, schema: pa.Schema, group_bytes: int) -> None:
        self._out = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._out.write(_csv_header(schema.names))
        super().__init__(lambda table: _csv_rows(table, self._out), group_bytes)

    def close(self) -> None:
        self._drain()
        self._out.close()


def file_format(name: str, compression: str = "zstd") -> FileFormat:
    return ParquetFormat(compression) if name == "parquet" else CsvFormat()
