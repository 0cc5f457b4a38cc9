"""Snapshots of the reference data analysts join to series: objects, devices, parameters, lookups.

Each table is a folder with one file per source (instance of the platform), a `source` column in it:
`dimensions/{table}/{source}.{ext}`, replaced whole. Objects and parameters come from discovery and are
written by every run; the reference tables fetched for them (units, commands, lookups) only when their
snapshot is older than `dimensions.refresh` or was taken of other objects (`due`): an hourly run makes
none of their requests. Records become Arrow pages spooled to local files (`Rows`), so a wide fleet's
records never pile up in memory; each file is then written page by page. Columns are snake_case and typed
(lists of strings, nested records as structs; etl/pipeline/records.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from etl.client import MonitoringClient
from etl.client.models import record_id
from etl.errors import DataError, InvalidResponse, StorageError, Throttled
from etl.pipeline import records
from etl.sinks import FileFormat
from etl.sinks.layout import DIMENSIONS_FOLDER
from etl.state.store import SnapshotNote
from etl.storage import spools
from etl.storage.atomic import Storage

PAGE = 250  # records converted to Arrow at a time: a few hundred dicts made and let go, not thousands
ROW_GROUP = 1000  # records per row group of a written table (pages gathered)
AT_ONCE = 64  # objects or devices whose records are asked for together (each an answer held until added)
LOOKUPS = ("zones", "classifiers", "room_types", "rooms")
REFERENCES = ("units", "commands", *LOOKUPS)  # fetched here


def due(
    note: Mapping[str, object], object_ids: list[int], sink: str, refresh_ms: int, now: int
) -> tuple[bool, SnapshotNote]:
    """Whether the reference tables are to be fetched again (`note`: what their last snapshot noted),
    and what to note once they are written."""
    objects = hashlib.sha256(",".join(map(str, sorted(object_ids))).encode()).hexdigest()[:32]
    fresh: SnapshotNote = {"fetched": now, "objects": objects, "sink": sink}
    fetched = note.get("fetched")
    age = now - fetched if isinstance(fetched, int) else -1
    kept = note.get("objects") == objects and note.get("sink") == sink and 0 <= age < refresh_ms
    return not kept, fresh


class Rows:
    """Records collected as Arrow pages spooled to local files, a page at a time, so a wide fleet's
    records are never all held; `write` streams them into one file with one schema."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._folder: str | None = None
        self._pages: list[tuple[str, pa.Schema]] = []
        self._pending: list[dict[str, Any]] = []
        self.count = 0

    def add(self, records: list[dict[str, Any]]) -> None:
        taken = 0
        while taken < len(records):  # pages of exactly PAGE records, however the lists come
            room = PAGE - len(self._pending)
            self._pending.extend(records[taken : taken + room])
            taken += room
            if len(self._pending) >= PAGE:
                self._flush()
        self.count += len(records)

    def add_table(self, table: pa.Table) -> None:
        """Rows already in Arrow (kept from the fleet's catalog), spooled as a page of their own after the
        records added before them: pages keep the order rows came in."""
        if not table.num_rows:
            return
        self._flush()
        self._spool(table)
        self.count += table.num_rows

    def _flush(self) -> None:
        if not self._pending:
            return
        table = records.records_table(self._pending)
        self._spool(table)
        self._pending = []  # only once spooled: a page that could not be is written with the next

    def _spool(self, table: pa.Table) -> None:
        try:
            self._folder = self._folder or spools.spool_folder("rows-")
            path = os.path.join(self._folder, f"{len(self._pages)}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise StorageError(
                f"cannot write {DIMENSIONS_FOLDER}/{self.name} (its local spool): {reason}"
            ) from None
        self._pages.append((path, table.schema))

    def schema(self) -> pa.Schema:
        """Every column of every page; where pages disagree on a type, one that holds both
        (etl/pipeline/records.py: records take every field of each), else JSON text."""
        types: dict[str, set[pa.DataType]] = {}
        for _, schema in self._pages:
            for field in schema:
                types.setdefault(field.name, set()).add(field.type)
        return pa.schema([pa.field(name, records.unify(name, found)) for name, found in types.items()])

    def tables(self, schema: pa.Schema | None = None) -> Iterator[pa.Table]:
        """Every page in the order added, with `schema`'s columns (default: `schema()`)."""
        self._flush()
        schema = self.schema() if schema is None else schema
        for path, _ in self._pages:
            with pa.memory_map(path) as mapped:
                table = pa.ipc.open_file(mapped).read_all()
            columns = [
                records.conform(table.column(field.name), field.type)
                if field.name in table.column_names
                else pa.nulls(table.num_rows, field.type)
                for field in schema
            ]
            yield pa.Table.from_arrays(columns, schema=schema)

    def pages(self, schema: pa.Schema, source: str) -> Iterator[pa.Table]:
        for page in self.tables(schema):
            yield page.add_column(0, "source", pa.array([source] * page.num_rows, pa.string()))

    def reader(self, source: str) -> pa.RecordBatchReader:
        """Every page as one stream of batches, `source` first (a lake table's snapshot); close() after."""
        self._flush()
        schema = self.schema()
        full = pa.schema([pa.field("source", pa.string()), *schema])
        return pa.RecordBatchReader.from_batches(
            full, (batch for page in self.pages(schema, source) for batch in page.to_batches())
        )

    def write(self, storage: Storage, fmt: FileFormat, rel: str, source: str) -> None:
        """One file of every page, swapped in whole."""
        self._flush()
        try:
            schema = self.schema()
            flat = fmt.extension == ".csv"  # CSV holds no lists or records: JSON text there
            if flat:
                schema = pa.schema(
                    [pa.field(f.name, pa.string()) if records.nested(f.type) else f for f in schema]
                )
            with storage.replacing(rel) as output, storage.errors("write", rel):
                # Row groups of about ROW_GROUP records: a wide fleet's table is not gathered into 8 MB
                # ones while slabs run beside it.
                writer = fmt.writer(
                    output, pa.schema([pa.field("source", pa.string()), *schema]), group_bytes=1
                )
                group: list[pa.Table] = []
                for page in self.pages(schema, source):
                    group.append(page)
                    if sum(p.num_rows for p in group) >= ROW_GROUP:
                        writer.write(pa.concat_tables(group))
                        group.clear()
                if group:
                    writer.write(pa.concat_tables(group))
                writer.close()
        finally:
            self.close()

    def close(self) -> None:
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder, self._pages = None, []


async def collect(
    client: MonitoringClient,
    object_ids: list[int],
    objects: Rows,
    parameters: Rows,
    references: bool = True,
) -> tuple[dict[str, Rows], list[str]]:
    """Every dimension table: objects and parameters as discovery listed them, the references fetched
    here (unless not `references`); and, one line each, the tables that could not be fetched (an answer
    that cannot be read, or throttled to the end): those are left as the last run wrote them."""
    tables = {"objects": objects, "parameters": parameters}
    failed: list[str] = []
    if not references:
        return tables, failed

    async def table(name: str, fetch: Callable[[Rows], Awaitable[None]]) -> None:
        rows = Rows(name)
        try:
            await fetch(rows)
        # An answer that cannot be read, or a server that throttles these calls to the end while others
        # get through: this table only (the last run's copy stays, the next run asks again).
        except (InvalidResponse, DataError, Throttled) as exc:
            rows.close()
            failed.append(f"dimension table {name}: {exc}")
        else:
            tables[name] = rows

    devices: set[int] = set()

    async def units(rows: Rows) -> None:
        for start in range(0, len(object_ids), AT_ONCE):
            chunk = object_ids[start : start + AT_ONCE]
            for object_id, found in zip(
                chunk, await asyncio.gather(*(client.units(o) for o in chunk)), strict=True
            ):
                rows.add([{"object_id": object_id, **u} for u in found if isinstance(u, dict)])
                devices.update(_device_ids(found))

    async def commands(rows: Rows) -> None:
        device_ids = sorted(devices)
        for start in range(0, len(device_ids), AT_ONCE):
            chunk = device_ids[start : start + AT_ONCE]
            for batch in await asyncio.gather(*(client.ext_commands(d) for d in chunk)):
                rows.add([c.raw() for c in batch])

    def lookup(fetch: Callable[[], Awaitable[list[dict[str, Any]]]]) -> Callable[[Rows], Awaitable[None]]:
        async def rows_of(rows: Rows) -> None:
            rows.add(await fetch())

        return rows_of

    await table("units", units)
    if "units" in tables:  # the devices come from the units
        await table("commands", commands)
    else:
        failed.append("dimension table commands: its devices come from the units, which failed")
    fetches = (client.zones, client.classifiers, client.room_types, client.rooms)
    await asyncio.gather(*(table(name, lookup(fetch)) for name, fetch in zip(LOOKUPS, fetches, strict=True)))
    order = ["objects", "units", "parameters", "commands", *LOOKUPS]
    return {name: tables[name] for name in order if name in tables}, failed


def _device_ids(units: list[dict[str, Any]]) -> set[int]:
    """The device ids of an object's units (deviceconnect.device.id), those that are ids."""
    found = set()
    for unit in units:
        connect = unit.get("deviceconnect") if isinstance(unit, dict) else None
        device = connect.get("device") if isinstance(connect, dict) else None
        if isinstance(device, dict):
            try:
                found.add(record_id(device.get("id")))
            except ValueError:
                continue  # not a device the commands can be asked for
    return found


def table_file(name: str, source: str, fmt: FileFormat) -> str:
    return f"{DIMENSIONS_FOLDER}/{name}/{source}{fmt.extension}"


def write(storage: Storage, fmt: FileFormat, tables: dict[str, Rows], source: str) -> list[str]:
    written = []
    for name, rows in tables.items():
        rel = table_file(name, source, fmt)
        rows.write(storage, fmt, rel, source)
        written.append(rel)
    return written
