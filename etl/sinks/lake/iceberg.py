"""Apache Iceberg tables through pyiceberg: `etl.raw`, `etl.average`, `etl.candles`, `etl.quality.rows` and
`etl.dimensions_{name}` in a catalog (by default SQLite at `{sink.path}/catalog.db`, warehouse
`{sink.path}`), partitioned by day of the time key (plus identity `object_id` when asked).

A slab's commit is one pyiceberg transaction: a copy-on-write delete of the replaced ranges and an
append, made visible by one swap of the table's metadata pointer in the catalog (which refuses a swap
from a stale pointer: optimistic concurrency). Both snapshots of the transaction carry the checkpoint in
their summary properties.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict
from datetime import UTC, datetime
from functools import reduce
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.dataset as ds

from etl.errors import ConfigError, StorageError
from etl.sinks.lake.common import Checkpoint, LakeTable, Replace
from etl.storage.files import Storage
from etl.support import redact
from etl.support.optional import require
from etl.timeutil import DAY_MS

NAMESPACE = "etl"
# A slab of new windows deletes nothing: pyiceberg says so each time (process-wide: catch_warnings is not
# thread-safe, and slabs commit from several threads).
warnings.filterwarnings("ignore", message="Delete operation did not match any records")


def catalog(storage: Storage, uri: str | None) -> Any:
    """The configured catalog, or SQLite at {sink.path}/catalog.db with the warehouse at {sink.path}."""
    require("pyiceberg", "sink.format iceberg")
    from pyiceberg.catalog import load_catalog

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


def expression(replace: Replace):
    from pyiceberg.expressions import AlwaysFalse, And, EqualTo, GreaterThanOrEqual, In, LessThan, Or

    if replace.source is not None:
        return EqualTo("source", replace.source)
    key = replace.time_key
    parts = [
        And(GreaterThanOrEqual(key, _iso(a)), LessThan(key, _iso(b)), In("param_id", set(ids)))
        for a, b, ids in replace.groups
    ]
    return reduce(Or, parts) if parts else AlwaysFalse()


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="microseconds")


def _properties(snapshot) -> dict[str, str]:
    summary = snapshot.summary
    return dict(getattr(summary, "additional_properties", {}) or {}) if summary is not None else {}


class IcebergTable(LakeTable):
    kind: ClassVar[str] = "iceberg"

    def __init__(
        self, catalog_: Any, storage: Storage, name: str, partition_by: tuple[str, ...], time_key: str | None
    ) -> None:
        super().__init__(name, partition_by, time_key)
        self.catalog, self.storage = catalog_, storage
        self.identifier = (NAMESPACE, name.replace("/", "_"))

    @property
    def uri(self) -> str:
        return f"iceberg:{self.storage.display()}:{'.'.join(self.identifier)}"

    def exists(self) -> bool:
        return self.catalog.table_exists(self.identifier)

    def _load(self):
        try:
            return self.catalog.load_table(self.identifier)
        except Exception as exc:  # noqa: BLE001
            raise StorageError(
                f"cannot open the Iceberg table {'.'.join(self.identifier)}: {str(exc).splitlines()[0]}"
            ) from None

    def _create(self, schema: pa.Schema):
        from pyiceberg.transforms import DayTransform, IdentityTransform

        txn = self.catalog.create_table_transaction(self.identifier, schema=schema)
        with txn.update_spec() as spec:
            if self.time_key:
                spec.add_field(self.time_key, DayTransform(), f"{self.time_key}_day")
            for column in self.partition_by:
                spec.add_field(column, IdentityTransform(), column)
        txn.commit_transaction()
        return self._load()

    def _commit(
        self, rows: pa.Table | pa.RecordBatchReader, replace: Replace, properties: dict[str, str]
    ) -> None:
        from pyiceberg.exceptions import TableAlreadyExistsError

        rows = rows.read_all() if isinstance(rows, pa.RecordBatchReader) else rows
        try:
            try:
                table = self._load() if self.exists() else self._create(rows.schema)
            except TableAlreadyExistsError:
                table = self._load()
            with table.transaction() as txn:
                if table.current_snapshot() is not None:
                    txn.delete(expression(replace), snapshot_properties=properties)
                if rows.num_rows or table.current_snapshot() is None:
                    txn.append(rows, snapshot_properties=properties)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StorageError(
                f"cannot commit to the Iceberg table {'.'.join(self.identifier)}: {str(exc).splitlines()[0]}"
            ) from None

    def history(self, app: str, after: int) -> list[Checkpoint]:
        if not self.exists():
            return []
        table = self._load()
        found: list[Checkpoint] = []
        snapshot = table.current_snapshot()
        while snapshot is not None:  # newest first, along the parents
            checkpoint = Checkpoint.parse(_properties(snapshot))
            if checkpoint is not None and checkpoint.app == app:
                if checkpoint.version <= after:
                    break
                if not found or found[-1].version != checkpoint.version:  # a transaction's two snapshots
                    found.append(checkpoint)
            parent = snapshot.parent_snapshot_id
            snapshot = table.snapshot_by_id(parent) if parent is not None else None
        return found[::-1]

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

    def compact(self) -> int:
        """pyiceberg has no data-file rewrite action: each partition of several files is rewritten into
        one by an overwrite of its rows (copy-on-write; a partition's rows are held in memory)."""
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

        table = self._load()
        groups: dict[tuple, list[str]] = defaultdict(list)
        for task in table.scan().plan_files():
            groups[tuple(task.file.partition)].append(task.file.file_path)
        rewritten = 0
        for key, files in groups.items():
            if len(files) < 2:
                continue
            if not self.time_key:  # a dimension table: unpartitioned, one file per snapshot already
                continue
            day = key[0]  # days since the epoch (the day transform)
            where = And(
                GreaterThanOrEqual(self.time_key, _iso(day * DAY_MS)),
                LessThan(self.time_key, _iso((day + 1) * DAY_MS)),
            )
            for column, value in zip(self.partition_by, key[1:], strict=True):
                where = And(where, EqualTo(column, value))
            rows = table.scan(row_filter=where).to_arrow()
            table.overwrite(rows, overwrite_filter=where)
            table = self._load()
            rewritten += len(files)
        return rewritten

    def vacuum(self, retain_ms: int) -> int:
        """Expire snapshots older than the retention (the current one always stays), then delete the data
        files that no remaining snapshot references and that are older than the retention too."""
        table = self._load()
        cutoff = int(datetime.now(tz=UTC).timestamp() * 1000) - retain_ms
        old = [
            s.snapshot_id
            for s in table.snapshots()
            if s.timestamp_ms < cutoff and s.snapshot_id != table.current_snapshot().snapshot_id
        ]
        if old:
            table.maintenance.expire_snapshots().by_ids(old).commit()
            table = self._load()
        keep = {self._path(p) for p in table.inspect.all_files().column("file_path").to_pylist()}
        folder = self._path(table.location()) + "/data"
        removed = 0
        for path, info in self.storage.fs.find(folder, detail=True).items():
            modified = info.get("mtime") or info.get("LastModified")
            stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
            if path.endswith(".parquet") and path not in keep and stamp * 1000 < cutoff:
                self.storage.fs.rm(path)
                removed += 1
        return removed
