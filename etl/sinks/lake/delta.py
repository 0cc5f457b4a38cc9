"""Delta Lake tables through delta-rs (`deltalake`): `{sink.path}/{series}`, `{sink.path}/quality` and
`{sink.path}/dimensions/{name}`.

A slab's commit is one `write_deltalake(mode="overwrite", predicate=...)`: delta-rs deletes the rows the
predicate matches (rewriting only the files that hold some) and adds the new files in a single log entry,
with the checkpoint as the entry's commit metadata and as an application transaction (`txn`, app id and
version), which Delta readers and writers know as "this app's progress". On S3 delta-rs commits with a
conditional PUT of the log entry (`conditional_put: etag`), so two writers never both win one version.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.dataset as ds

from etl.errors import StorageError
from etl.sinks.lake.common import Checkpoint, LakeTable, Replace
from etl.storage.files import Storage
from etl.support.optional import require


def delta_options(storage: Storage) -> dict[str, str]:
    """delta-rs's storage options from the sink's: its object store reads AWS_* itself; the endpoint of
    an S3-compatible store, plain http for one on loopback, and the safe commit are said here."""
    if storage.local:
        return {}
    options: dict[str, Any] = {"conditional_put": "etag"}  # commits are PUT-if-absent: no unsafe rename
    endpoint = storage.options.get("endpoint_url") or storage.options.get("client_kwargs", {}).get(
        "endpoint_url"
    )
    if endpoint:
        options["aws_endpoint_url"] = endpoint
        if str(endpoint).startswith("http://"):
            options["aws_allow_http"] = "true"
    for ours, theirs in (
        ("key", "aws_access_key_id"),
        ("secret", "aws_secret_access_key"),
        ("token", "aws_session_token"),
    ):
        if storage.options.get(ours):
            options[theirs] = storage.options[ours]
    region = storage.options.get("client_kwargs", {}).get("region_name") or os.environ.get(
        "AWS_DEFAULT_REGION"
    )
    if region:
        options.setdefault("aws_region", region)
    return {k: str(v) for k, v in options.items()}


def _sql_time(ms: int) -> str:
    return "'" + datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "'"


def _sql_date(ms: int) -> str:
    return "'" + datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d") + "'"


def predicate(replace: Replace) -> str:
    """delta-rs's SQL predicate: the `date` bounds let it skip every other partition's files."""
    if replace.source is not None:
        return "source = '" + replace.source.replace("'", "''") + "'"
    key = replace.time_key
    return (
        " OR ".join(
            f"(date >= {_sql_date(a)} AND date <= {_sql_date(b - 1)} AND {key} >= {_sql_time(a)} AND {key} < {_sql_time(b)}"
            f" AND param_id IN ({','.join(map(str, ids))}))"
            for a, b, ids in replace.groups
        )
        or "false"
    )


class DeltaTable(LakeTable):
    kind: ClassVar[str] = "delta"

    def __init__(
        self, storage: Storage, rel: str, partition_by: tuple[str, ...], time_key: str | None
    ) -> None:
        super().__init__(rel, partition_by, time_key)
        self.deltalake = require("deltalake", "sink.format delta")
        self.storage, self.rel = storage, rel
        self.options = delta_options(storage)
        self._exists = False

    @property
    def uri(self) -> str:
        return self.storage.display(self.rel) if not self.storage.local else self.storage.full(self.rel)

    def _table(self):
        try:
            return self.deltalake.DeltaTable(self.uri, storage_options=self.options)
        except Exception as exc:  # noqa: BLE001 - delta-rs raises its own classes, and OSError
            raise StorageError(
                f"cannot open the Delta table {self.uri}: {str(exc).splitlines()[0]}"
            ) from None

    def exists(self) -> bool:
        # Asked once until true: delta-rs holds the GIL through this call's requests, which would stall
        # the run's event loop on every commit to an object store.
        if not self._exists:
            self._exists = self.deltalake.DeltaTable.is_deltatable(self.uri, storage_options=self.options)
        return self._exists

    def _commit(
        self, rows: pa.Table | pa.RecordBatchReader, replace: Replace, properties: dict[str, str]
    ) -> None:
        dl = self.deltalake
        txns = [dl.Transaction(properties["etl.app"], int(properties["etl.version"]))] if properties else None
        new = not self.exists()
        try:
            dl.write_deltalake(
                self.uri,
                rows,
                mode="append" if new else "overwrite",
                predicate=None if new else predicate(replace),
                partition_by=list(self.partition_by) or None,
                storage_options=self.options,
                writer_properties=dl.WriterProperties(compression="ZSTD"),
                commit_properties=dl.CommitProperties(
                    custom_metadata=properties or None, app_transactions=txns
                ),
            )
        except Exception as exc:  # noqa: BLE001 - one line, the table named; never a traceback
            raise StorageError(
                f"cannot commit to the Delta table {self.uri}: {str(exc).splitlines()[0]}"
            ) from None

    def latest(self, app: str) -> int:
        # The application transaction is part of the table's snapshot: no need to read the history.
        return self._table().transaction_version(app) or 0

    def history(self, app: str, after: int) -> list[Checkpoint]:
        found = []
        for commit in self._table().history():  # newest first
            checkpoint = Checkpoint.parse(commit)
            if checkpoint is None or checkpoint.app != app:
                continue
            if checkpoint.version <= after:
                break
            found.append(checkpoint)
        return found[::-1]

    def dataset(self) -> ds.Dataset:
        return self._table().to_pyarrow_dataset()

    def compact(self) -> int:
        metrics = self._table().optimize.compact()
        return int(metrics.get("numFilesRemoved", 0))

    def vacuum(self, retain_ms: int) -> int:
        table = self._table()
        hours = max(0, retain_ms // 3_600_000)
        # Files a version younger than `retain` still needs stay: a reader on such a version keeps working.
        removed = table.vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=False)
        table.cleanup_metadata()  # log entries past the retention (delta.logRetentionDuration)
        return len(removed)
