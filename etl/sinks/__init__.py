"""Partitioned, atomic Parquet/CSV datasets."""

from etl.sinks.dataset import DatasetWriter, Replaced, shard_label
from etl.sinks.formats import CsvFormat, FileFormat, ParquetFormat, file_format

__all__ = ["CsvFormat", "DatasetWriter", "FileFormat", "ParquetFormat", "Replaced", "file_format", "shard_label"]
