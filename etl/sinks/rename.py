"""A source's rows moved under another source name (`etl state rename-source`): each of its files written
again, a batch at a time, with the new name in its file name, its `source` column and its `source=`
partition folder, then swapped in before the old file is removed. A reader listing a folder in between may
count a file's rows twice for a moment, never miss one; a rename killed there is healed when it is run
again (the old file is still the whole truth and is written again). Parquet/CSV datasets only: the caller
holds every state lock of both names, so no run writes meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from etl.sinks.formats import FileFormat
from etl.sinks.layout import DIMENSIONS_FOLDER, FileKey, Layout
from etl.storage.atomic import Storage

Batches = Callable[[IO[bytes], str], Iterator[pa.Table]]  # a file's rows (handle, its name), as written again


def rename_layout(storage: Storage, fmt: FileFormat, layout: Layout, new: str) -> int:
    """Every file of `layout.source` in `layout`'s dataset written again under `new`; the files moved."""
    moved = 0
    for rel in storage.find(layout.name):
        folder, _, name = rel.rpartition("/")
        key = layout.data_key(name)
        if key is None or key.source != layout.source:
            continue  # another source's, or an older version's file (its rows take the reader's source)
        target = FileKey(new, key.shard, key.bucket, key.buckets).name(fmt.extension)
        parts = [f"source={new}" if part == f"source={layout.source}" else part for part in folder.split("/")]

        def batches(handle: IO[bytes], where: str, folder: str = folder) -> Iterator[pa.Table]:
            for batch in fmt.batches(handle, layout.schema, where):
                batch = layout.fill_partition_columns(batch, folder)
                if "source" in layout.file_schema.names:
                    at = batch.schema.get_field_index("source")
                    batch = batch.set_column(at, "source", pa.array([new] * batch.num_rows, pa.string()))
                yield batch.select(layout.file_schema.names)

        _move(storage, fmt, rel, f"{'/'.join(parts)}/{target}", layout.file_schema, batches)
        moved += 1
    if "source" in layout.partition_by:  # the old name's partition folders, emptied
        storage.prune(f"{layout.name}/source={layout.source}")
    return moved


def rename_dimensions(storage: Storage, fmt: FileFormat, old: str, new: str) -> int:
    """Each reference table's file of source `old` written again as `new`'s; the files moved."""
    moved = 0
    for table in storage.listdir(DIMENSIONS_FOLDER):
        rel = f"{DIMENSIONS_FOLDER}/{table}/{old}{fmt.extension}"
        version = storage.open_version(rel)
        if version.handle is None:
            continue
        try:
            schema = _schema(version.handle, fmt)
        finally:
            version.close()

        def batches(handle: IO[bytes], where: str, schema: pa.Schema = schema) -> Iterator[pa.Table]:
            for batch in fmt.batches(handle, schema, where):
                at = batch.schema.get_field_index("source")
                yield batch.set_column(at, "source", pa.array([new] * batch.num_rows, pa.string()))

        _move(storage, fmt, rel, f"{DIMENSIONS_FOLDER}/{table}/{new}{fmt.extension}", schema, batches)
        moved += 1
    return moved


def _schema(handle: IO[bytes], fmt: FileFormat) -> pa.Schema:
    """A reference table's own schema: Parquet's, or a CSV header's names as text (kept as written)."""
    if fmt.extension == ".parquet":
        return pq.read_schema(handle)
    names = handle.readline().decode("utf-8").rstrip("\r\n").split(",")
    return pa.schema([pa.field(name, pa.string()) for name in names])


def _move(
    storage: Storage, fmt: FileFormat, rel: str, target: str, schema: pa.Schema, batches: Batches
) -> None:
    """`rel`'s rows, as `batches` turns them, written to `target` (swapped in whole), then `rel` removed."""
    version = storage.open_version(rel)
    if version.handle is None:  # gone since it was listed
        return
    try:
        with storage.replacing(target) as output, storage.errors("write", target):
            writer = fmt.writer(output, schema)
            for batch in batches(version.handle, storage.display(rel)):
                writer.write(batch)
            writer.close()
    finally:
        version.close()
    storage.remove(rel)
