"""Partitioned, atomic Parquet/CSV datasets."""

from etl.sinks.files import SlabWriter
from etl.sinks.formats import CsvFormat, FileFormat, ParquetFormat, file_format
from etl.sinks.layout import FileKey, Layout

__all__ = ["CsvFormat", "FileFormat", "FileKey", "Layout", "ParquetFormat", "SlabWriter", "file_format"]
