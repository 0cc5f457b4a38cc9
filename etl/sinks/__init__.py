"""Where a slab's rows go: partitioned, atomic Parquet/CSV datasets (`hive.SlabWriter`), or lake tables
(`lake/`), behind one seam (`base.SlabSink`)."""

from etl.sinks.base import SlabOutcome, SlabSink
from etl.sinks.formats import CsvFormat, FileFormat, ParquetFormat, file_format
from etl.sinks.hive import SlabWriter
from etl.sinks.layout import FileKey, Layout

__all__ = [
    "CsvFormat",
    "FileFormat",
    "FileKey",
    "Layout",
    "ParquetFormat",
    "SlabOutcome",
    "SlabSink",
    "SlabWriter",
    "file_format",
]
