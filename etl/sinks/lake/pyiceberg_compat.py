"""The one place etl reaches past pyiceberg's public surface, for the pyiceberg versions it is tested with
(checked at import: any other stops the run with one line naming the supported range). Each override has
a test that fails once pyiceberg no longer needs it (tests/unit/sinks/test_iceberg_race.py,
tests/unit/sinks/test_pyiceberg_compat.py).

`transaction`: `Table.transaction()` whose `table_metadata` is computed once per change of the table's
metadata or of the staged updates, not at each read. pyiceberg's applies every staged update to the
table's metadata and deep-copies the result at each of the dozens of reads a commit makes, a cost that
grows with the snapshots the table keeps. Unneeded once apache/iceberg-python#3784 (or #3302, the same
cache) is released.

`overwrite`: the snapshot producer of `Transaction.update_snapshot().overwrite()`, whose manifest
evaluator is safe to call from several threads. pyiceberg's overwrite (its own `delete` and `overwrite`
included) looks for the files it removes in the parent snapshot's manifests from a thread pool, with one
evaluator per partition spec, and that evaluator keeps the manifest it is judging on itself
(`_ManifestEvalVisitor.partition_fields`) while it walks the filter: a thread can judge its manifest by
another one's partition bounds, skip the manifest that lists a file to remove, and fail the commit with
"Missing required files to delete". Here each call judges on a copy of its own. Unneeded once the
manifest evaluator keeps that state per call, as apache/iceberg-python#3664 did for the partition
evaluator (`_ExpressionEvaluator`); no upstream issue or pull request covers the manifest evaluator yet.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyiceberg
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import update_table_metadata
from pyiceberg.table.update.snapshot import _OverwriteFiles

from etl.errors import ConfigError
from etl.support.optional import EXTRAS

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update import TableUpdate

REQUIREMENT = EXTRAS["lake"]["pyiceberg"]  # the lake extra's: >=A.B,<C.D, the releases etl is tested with


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version: '0.12.0' and '0.12.1rc1' -> (0, 12)."""
    major, minor = (int(n) for n in re.findall(r"\d+", version)[:2])
    return major, minor


def supported(version: str) -> bool:
    """Is this pyiceberg release within the requirement's range?"""
    low, high = (release(v) for v in re.findall(r"[<>]=?([\d.]+)", REQUIREMENT))
    return low <= release(version) < high


if not supported(pyiceberg.__version__):
    raise ConfigError(
        f"sink.format iceberg needs {REQUIREMENT}, found pyiceberg {pyiceberg.__version__}:"
        f" pip install '{REQUIREMENT}'"
    )


class _Transaction(Transaction):
    _seen: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        # Both inputs are replaced, never changed in place: the same objects mean the same result.
        base, updates = self._table.metadata, self._updates
        if self._seen is None or self._seen[0] is not base or self._seen[1] is not updates:
            self._seen = (base, updates, update_table_metadata(base, updates))
        return self._seen[2]


def transaction(table: Table) -> Transaction:
    """`table.transaction()`, its metadata computed once per change (the module's docstring)."""
    return _Transaction(table)


def thread_safe(evaluate: Callable[[ManifestFile], bool]) -> Callable[[ManifestFile], bool]:
    """pyiceberg's manifest evaluator (a bound `eval`), evaluating each manifest on a copy of its own."""
    visitor = evaluate.__self__  # type: ignore[attr-defined]  # a bound method of the visitor
    return lambda manifest: bool(copy.copy(visitor).eval(manifest))


class _Overwrite(_OverwriteFiles):
    def _build_manifest_evaluator(self, spec_id: int) -> Callable[[ManifestFile], bool]:
        return thread_safe(super()._build_manifest_evaluator(spec_id))


def overwrite(txn: Transaction, io: FileIO, properties: dict[str, str]) -> _OverwriteFiles:
    """`txn.update_snapshot(snapshot_properties=properties).overwrite()` of a table that has a snapshot,
    its manifest evaluator thread-safe (the module's docstring)."""
    return _Overwrite(operation=Operation.OVERWRITE, transaction=txn, io=io, snapshot_properties=properties)
