"""Data files written outside a commit (by Dask workers), and committed by the run's coordinator."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from etl.sinks.lake.common import LakeTable, Replace


def write_data_files(table: LakeTable, rows: pa.Table) -> list[Any]:
    raise NotImplementedError


def rewrite_delta_files(table: LakeTable, dt: Any, replace: Replace) -> list[Any]:
    raise NotImplementedError


def delta_schema(action: Any, partition_by: tuple[str, ...]) -> pa.Schema:
    raise NotImplementedError
