"""Partitioned, atomic Parquet/CSV datasets."""

from etl.sinks.dataset import DatasetWriter, Replaced, WriteResult
from etl.sinks.formats import CsvFormat, FileFormat, ParquetFormat, file_format

__all__ = ["CsvFormat", "DatasetWriter", "FileFormat", "ParquetFormat", "Replaced", "WriteResult", "file_format"]
