"""The fleet's catalog kept between runs, beside the checkpoints: the parameters each object had when its
lists were last asked, so that a run lists only the objects it has not seen and those due again
(etl/pipeline/catalog.py says which).

    {store}/catalog/{login}.parquet   one file per login and platform (`login_key`): a login never reads
                                      what another listed, whose rights may differ

A file holds one row per selected parameter: the record as the parameters' dimension table holds it,
and the catalog's own columns `_id`, `_object` and `_kind` (a record's snake_case columns never start
with `_`). Its metadata say which selection it was listed for, when it was written, and per object when
its parameters were listed and when they are due again: int64 arrays, not a record per object. Rows are
read and written a row group at a time, never as a Python object per parameter. The file is written
whole under a temp name and swapped in (one PUT on object stores), so a run killed at any moment leaves
the old catalog or the new one; one that cannot be read is rebuilt by listing every object again.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from etl.state.lock import Lock
from etl.storage.atomic import Storage, Version

log = logging.getLogger(__name__)

FOLDER = "catalog"
VERSION = 1
ROW_GROUP = 4096  # rows a row group holds: what reading or writing a catalog holds at a time
KEYS = ("_id", "_object", "_kind")  # the catalog's own columns beside the record's
_META = b"etl.catalog"


def login_key(platform: str, username: str) -> str:
    """The name of a login's catalog on an instance: a digest, so the file names no login."""
    return hashlib.sha256(f"{platform}\n{username}".encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Listings:
    """Per object, sorted by id: when its parameters were listed, and when they are due again (epoch ms)."""

    object_id: np.ndarray
    listed: np.ndarray
    due: np.ndarray

    @classmethod
    def empty(cls) -> Listings:
        none = np.empty(0, np.int64)
        return cls(none, none, none)

    def __len__(self) -> int:
        return len(self.object_id)


@dataclass
class Kept:
    """A catalog as read: its listings, when its run wrote it, and its rows a row group at a time."""

    listings: Listings
    written: int
    rows: int
    _file: pq.ParquetFile

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from self._file.iter_batches(batch_size=ROW_GROUP, use_threads=False)


def _array(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values, np.int64).tobytes()).decode()


def _values(text: object) -> np.ndarray:
    if not isinstance(text, str):
        raise ValueError("not an array")
    return np.frombuffer(base64.b64decode(text), np.int64).copy()


class Catalog:
    """One login's catalog in a state folder; written under the run lock."""

    def __init__(self, storage: Storage, key: str, lock: Lock | None = None) -> None:
        self.storage = storage
        self.rel = f"{FOLDER}/{key}.parquet"
        self.lock = lock

    def display(self) -> str:
        return self.storage.display(self.rel)

    @contextmanager
    def read(self, selection: str) -> Iterator[Kept | None]:
        """The catalog listed for `selection` (a digest of what the config selects), or None: none yet,
        another selection's, or one that cannot be read (said in the log: every object is listed again)."""
        version: Version | None = None
        try:
            version = self.storage.open_version(self.rel)
            yield self._open(version, selection) if version.handle is not None else None
        finally:
            if version is not None:
                version.close()

    def _open(self, version: Version, selection: str) -> Kept | None:
        try:
            file = pq.ParquetFile(version.handle)
            meta = orjson.loads((file.schema_arrow.metadata or {})[_META])
            if meta.get("version") != VERSION or meta.get("selection") != selection:
                log.debug(
                    "the catalog %s was listed for another selection: listing every object", self.display()
                )
                return None
            listings = Listings(*(_values(meta[k]) for k in ("objects", "listed", "due")))
            if not len(listings.object_id) == len(listings.listed) == len(listings.due):
                raise ValueError("listings of different lengths")
            if not set(KEYS) <= set(file.schema_arrow.names):
                raise ValueError("no catalog columns")
            return Kept(listings, int(meta["written"]), file.metadata.num_rows, file)
        except Exception as exc:  # noqa: BLE001 - any damage is the same: list again, write it anew
            log.warning("the catalog %s cannot be read (%s): listing every object again", self.display(), exc)
            return None

    def write(self, selection: str, written: int, listings: Listings, pages: Iterable[pa.Table]) -> None:
        """The catalog made of `pages` (tables of one schema, `KEYS` among their columns), in row groups
        of ROW_GROUP rows, swapped in whole."""
        if self.lock is not None:
            self.lock.check()
        meta = {
            "version": VERSION,
            "selection": selection,
            "written": written,
            "objects": _array(listings.object_id),
            "listed": _array(listings.listed),
            "due": _array(listings.due),
        }
        header = {_META: orjson.dumps(meta)}
        with self.storage.replacing(self.rel) as output, self.storage.errors("write", self.rel):
            writer: pq.ParquetWriter | None = None
            try:
                for table in _groups(pages):
                    if writer is None:
                        writer = pq.ParquetWriter(
                            output, table.schema.with_metadata(header), compression="zstd"
                        )
                    writer.write_table(table)
                if writer is None:  # no parameter: the listings still say which objects were listed
                    schema = pa.schema(list(zip(KEYS, _KEY_TYPES, strict=True)), metadata=header)
                    writer = pq.ParquetWriter(output, schema)
            finally:
                if writer is not None:
                    writer.close()

    def forget(self, ids: np.ndarray, selection: str) -> int:
        """The catalog without the parameters `ids` (gone from the platform); how many it held."""
        ids = np.asarray(ids, np.int64)
        with self.read(selection) as kept:
            if kept is None:
                return 0
            held = 0

            def pages() -> Iterator[pa.Table]:
                nonlocal held
                for batch in kept.batches():
                    gone = np.isin(batch.column("_id").to_numpy(zero_copy_only=False), ids)
                    held += int(gone.sum())
                    yield pa.Table.from_batches([batch.filter(pa.array(~gone))])

            self.write(selection, kept.written, kept.listings, pages())
        return held


_KEY_TYPES = (pa.int64(), pa.int64(), pa.int8())


def _groups(pages: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Pages gathered into tables of about ROW_GROUP rows."""
    group: list[pa.Table] = []
    rows = 0
    for page in pages:
        group.append(page)
        rows += page.num_rows
        if rows >= ROW_GROUP:
            yield pa.concat_tables(group)
            group, rows = [], 0
    if group:
        yield pa.concat_tables(group)
