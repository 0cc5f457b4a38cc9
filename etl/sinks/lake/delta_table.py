"""Delta Lake tables through delta-rs (`deltalake`): `{sink.path}/{series}`, `{sink.path}/quality` and
`{sink.path}/dimensions/{name}`; their handle, made and opened here. A commit is one log entry
(delta_commit.py); data files etl writes itself, a Dask worker's, a rewrite's, a merge's, are
delta_files.py's; the upkeep is delta_upkeep.py's.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from etl.errors import StorageError
from etl.sinks.lake import delta_commit, delta_upkeep
from etl.sinks.lake.common import (
    TS_US,
    Change,
    Checkpoint,
    DayFiles,
    LakeTable,
    Policy,
    missing_columns,
)
from etl.sinks.lake.delta_files import write_files
from etl.storage.atomic import Storage
from etl.support import optimistic
from etl.support.optional import require

if TYPE_CHECKING:  # deltalake loads for Delta tables only
    from deltalake import DeltaTable as Handle  # delta-rs's; this module's DeltaTable is etl's LakeTable
    from deltalake.transaction import AddAction

CHECKPOINT_EVERY = 10  # versions between two log checkpoints: what a load replays at most
NEVER_MS = 100 * 365 * 86_400_000  # retention "off": a duration Delta accepts


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


def _interval(ms: int | None) -> str:
    return f"interval {max(0, (NEVER_MS if ms is None else ms)) // 1000} seconds"


class DeltaTable(LakeTable):
    kind: ClassVar[str] = "delta"

    def __init__(
        self, storage: Storage, rel: str, partition_by: tuple[str, ...], time_key: str | None, policy: Policy
    ) -> None:
        super().__init__(rel, partition_by, time_key, policy)
        self.deltalake = require("deltalake", "sink.format delta")
        self.storage, self.rel = storage, rel
        self.options = delta_options(storage)
        self._exists = False
        self._dt: Handle | None = None  # the handle, kept from one commit to the next

    @property
    def uri(self) -> str:
        return self.storage.display(self.rel) if not self.storage.local else self.storage.full(self.rel)

    def _open(self) -> Handle:
        # Twice: another source's upkeep may delete the checkpoint `_last_checkpoint` named while the
        # table loads; the second load finds the newer one.
        error: Exception | None = None
        for _ in range(2):
            try:
                opened: Handle = self.deltalake.DeltaTable(self.uri, storage_options=self.options)
                return opened
            except Exception as exc:  # noqa: BLE001 - delta-rs raises its own classes, and OSError
                error = exc
                if isinstance(exc, self.deltalake.exceptions.TableNotFoundError):
                    break
        raise StorageError(f"cannot open the Delta table {self.uri}: {str(error).splitlines()[0]}") from None

    def _handle(self) -> Handle:
        if self._dt is None:
            self._dt = self._open()
            self._configure(self._dt)
        return self._dt

    def configuration(self) -> dict[str, str]:
        """Table properties: a checkpoint every CHECKPOINT_EVERY versions; the retention as Delta's own
        (for other tools' vacuum); log cleanup is ours (it also keeps at most `sink.versions`)."""
        retention = _interval(self.policy.retention_ms)
        return {
            "delta.checkpointInterval": str(CHECKPOINT_EVERY),
            "delta.logRetentionDuration": retention,
            "delta.deletedFileRetentionDuration": retention,
            "delta.enableExpiredLogCleanup": "false",
        }

    def _made(self) -> dict[str, Any]:
        """How the table is made, by its first commit or empty."""
        return {
            "partition_by": list(self.partition_by) or None,
            "configuration": self.configuration(),
            "storage_options": self.options,
        }

    def _configure(self, dt: Handle) -> None:
        """A table made by an older version, or under another retention, gets these properties once."""
        want = self.configuration()
        have = dt.metadata().configuration
        if any(have.get(k) != v for k, v in want.items()):
            with contextlib.suppress(Exception):  # best effort: the table works without them
                dt.alter.set_table_properties(want, raise_if_not_exists=False)

    def exists(self) -> bool:
        # Asked once until true: delta-rs holds the GIL through this call's requests, which would stall
        # the run's event loop on every commit to an object store.
        if not self._exists:
            self._exists = self.deltalake.DeltaTable.is_deltatable(self.uri, storage_options=self.options)
        return self._exists

    # -- committing --------------------------------------------------------------------------------

    def _commit(self, change: Change) -> list[str]:
        if change.ready is not None:  # delta-rs writes and commits in one call: nothing to overlap
            change.ready()
        try:
            if not self.exists():
                return self._create(change.rows, change.checkpoint)
            if change.rows is not None:
                self._add_columns(change.rows.schema)
            return delta_commit.commit(self._newest, self.storage, self.rel, self.partition_by, change)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - one line, the table named; never a traceback
            raise StorageError(
                f"cannot commit to the Delta table {self.uri}: {str(exc).splitlines()[0]}"
            ) from None

    def _newest(self) -> Handle:
        self._refresh()
        return self._handle()

    def _create(self, rows: pa.Table | None, checkpoint: Checkpoint | None) -> list[str]:
        dl = self.deltalake
        if rows is None:
            raise StorageError(f"the Delta table {self.uri} is missing (it is made before workers write)")
        dl.write_deltalake(
            self.uri,
            rows,
            mode="append",
            writer_properties=dl.WriterProperties(compression="ZSTD"),
            commit_properties=delta_commit.properties(checkpoint),
            **self._made(),
        )
        self._exists = True
        return sorted(delta_commit.paths(self._handle()))

    def _add_columns(self, schema: pa.Schema) -> None:
        def attempt() -> None:
            dt = self._handle()
            missing = missing_columns(dt.schema().to_arrow().names, schema)
            if missing is not None:
                dt.alter.add_columns(list(self.deltalake.Schema.from_arrow(missing).fields))

        # Lost: another writer (another source's run) changed the table first.
        optimistic.swap(attempt, delta_commit.lost_race, again=self._refresh)

    def prepare(self, schema: pa.Schema) -> None:
        if self.exists():
            self._add_columns(schema)
        if not self.exists():
            with contextlib.suppress(self.deltalake.exceptions.DeltaError):  # made meanwhile: fine
                self.deltalake.DeltaTable.create(self.uri, schema, mode="ignore", **self._made())
            self._exists = True

    def write_files(self, rows: pa.Table) -> list[AddAction]:
        return write_files(self.storage, self.rel, self.partition_by, rows)

    # -- checkpoints -------------------------------------------------------------------------------

    def latest(self, app: str) -> int:
        # The application transaction is part of the table's snapshot: no need to read the history.
        if not self.exists():
            return 0
        return self._handle().transaction_version(app) or 0

    def history(self, app: str, after: int) -> list[Checkpoint]:
        found = []
        for commit in self._commits():  # newest first, as far as the log still goes
            checkpoint = Checkpoint.parse(commit)
            if checkpoint is None or checkpoint.app != app:
                continue
            if checkpoint.version <= after:
                break
            found.append(checkpoint)
        return found[::-1]

    def _commits(self) -> list[dict[str, Any]]:
        """The log's commits, read again when another writer's upkeep deleted an entry while it was read."""
        error: Exception | None = None
        for _ in range(optimistic.ATTEMPTS):
            try:
                return self._open().history()
            except self.deltalake.exceptions.DeltaError as exc:
                error = exc
        raise StorageError(f"cannot read the log of the Delta table {self.uri}: {str(error).splitlines()[0]}")

    # -- reading -----------------------------------------------------------------------------------

    def dataset(self) -> ds.Dataset:
        return self._open().to_pyarrow_dataset()

    def _rows_of(self, source: str) -> pa.Table:
        return self._handle().to_pyarrow_dataset().to_table(filter=pc.field("source") == source)

    def _read(self, source: str, params: list[int], start: int, end: int) -> pa.Table:
        with self._read_lock:
            if self._reader is None:
                self._reader = self._open().to_pyarrow_dataset()
            dataset = self._reader
        assert self.time_key is not None
        key = pc.field(self.time_key)
        where = (
            (pc.field("source") == source)
            & pc.field("param_id").isin(params)
            & (key >= pa.scalar(start * 1000, TS_US))
            & (key < pa.scalar(end * 1000, TS_US))
        )
        if "date" in self.partition_by:  # lets the dataset skip other days' files
            days = pa.array([start // 86_400_000, (end - 1) // 86_400_000], pa.int32()).cast(pa.date32())
            where = where & (pc.field("date") >= days[0]) & (pc.field("date") <= days[1])
        return dataset.to_table(filter=where)

    # -- upkeep ------------------------------------------------------------------------------------

    def day_files(self, source: str | None = None) -> list[DayFiles]:
        return delta_upkeep.day_files(self._handle(), self.partition_by, source)

    def _compact(self, days: list[DayFiles], source: str) -> int:
        return delta_upkeep.compact(self._handle(), self.storage, self.rel, self.partition_by, days, source)

    def _expire(self, retention_ms: int | None, versions: int, now: bool = False) -> int:
        return delta_upkeep.expire(
            self._handle(), self.storage, self.rel, retention_ms, versions, self.policy.slack, now
        )

    def _sweep(self, retention_ms: int) -> int:
        return delta_upkeep.sweep(self._handle(), retention_ms)

    def _refresh(self) -> None:
        if self._dt is None:
            return
        try:
            self._dt.update_incremental()
        except self.deltalake.exceptions.DeltaError:  # the entries after its version were cleaned up
            self._dt = None
