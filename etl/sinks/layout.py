"""Where a series' rows live: Hive partition folders and file names, mapped both ways.

    {series}/[source=S/]date=YYYY-MM-DD/[object_id=N/]part-{source}-[s{I}of{N}-]b{i}of{B}.{ext}

A partition holds one file per (source, shard, bucket): a parameter's rows of a partition are in the
file of its bucket (`etl.model.bucket_of`), so files stay a fleet-day divided by `sink.buckets` and a
run rewrites only the files of the parameters it fetched. Readers glob `{series}/**/*.{ext}`; hidden
names (temp files) are not data, as for every reader. Names of older versions (`part-0`, `part-sIofN`)
are still recognised, so their rows are moved out when their parameters are written again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from etl.model import SCHEMAS, Series, Shard, bucket_of
from etl.timeutil import DAY_MS

# sink.buckets when it is not set. A file costs CPU to write whatever its size (its writer, column chunks,
# fsyncs, a quality file beside it), so a small fleet's days are written one file each (docs/performance.md,
# "Files per partition"). From AUTO_WIDE up the fleet's day files are split four ways as before: a day of
# 800 parameters sampled every 30 s is about 2.3 M rows, and four files of it are written side by side.
AUTO_WIDE = 800
LEGACY_BUCKETS = 4  # every dataset's count before `auto`, and a lake table's
# The reference tables' folder: dimensions/{table}/{source}.{ext}, one file per source (etl/pipeline/dimensions.py).
DIMENSIONS_FOLDER = "dimensions"


def auto_buckets(parameters: int) -> int:
    """Files per partition for a new Parquet/CSV dataset of this many parameters."""
    return 1 if parameters < AUTO_WIDE else LEGACY_BUCKETS


_NAME = re.compile(r"(?P<source>.+?)(?:-(?P<shard>s\d+of\d+))?-b(?P<bucket>\d+)of(?P<buckets>\d+)")


def date_of(day: int) -> str:
    return str(np.datetime64(day * DAY_MS, "ms").astype("datetime64[D]"))


@dataclass(frozen=True, slots=True)
class FileKey:
    """Who writes a file: a source's shard layout and bucket (source None: a name of an older version)."""

    source: str | None
    shard: Shard | None
    bucket: int | None
    buckets: int | None

    def name(self, extension: str) -> str:
        parts = [self.source, self.shard.label if self.shard else None, f"b{self.bucket}of{self.buckets}"]
        return "part-" + "-".join(p for p in parts if p) + extension

    @classmethod
    def parse(cls, name: str, extension: str) -> FileKey | None:
        if not name.startswith("part-") or not name.endswith(extension):
            return None
        stem = name[len("part-") : -len(extension)]
        if stem == "0" or (old_shard := Shard.from_label(stem)):  # one file per writer, no source
            return cls(None, None if stem == "0" else old_shard, None, None)
        match = _NAME.fullmatch(stem)
        if not match:
            return None
        shard = Shard.from_label(match.group("shard")) if match.group("shard") else None
        return cls(match.group("source"), shard, int(match.group("bucket")), int(match.group("buckets")))


class Layout:
    """The files of a series; or of another per-parameter dataset laid out the same way (`name`, its
    `schema` and the `time_key` column its rows are sorted and replaced by, e.g. the quality dataset's
    `day`), which `series` then describes."""

    def __init__(
        self,
        series: Series,
        partition_by: Sequence[str],
        extension: str,
        source: str,
        shard: Shard | None = None,
        buckets: int = 4,
        *,
        name: str | None = None,
        schema: pa.Schema | None = None,
        time_key: str = "ts",
    ) -> None:
        self.series = Series(series)
        self.name = name or self.series.value
        self.partition_by = tuple(partition_by)
        self.extension = extension
        self.source = source
        self.shard = shard
        self.buckets = buckets
        self.schema = SCHEMAS[self.series] if schema is None else schema
        self.time_key = time_key
        self.file_schema = pa.schema([f for f in self.schema if f.name not in self.partition_by])
        # One shared empty table (tables are immutable): a rewrite starts and ends its buffers with it, and
        # making one costs tens of microseconds (pyarrow reads the environment for each timestamp field).
        self.empty = self.schema.empty_table()
        self.by_object = "object_id" in self.partition_by

    @property
    def glob(self) -> str:
        return f"{self.name}/**/*{self.extension}"

    def bucket(self, param_id: int) -> int:
        return bucket_of(param_id, self.buckets)

    def key(self, bucket: int) -> FileKey:
        return FileKey(self.source, self.shard, bucket, self.buckets)

    def partition(self, day: int, object_id: int) -> str:
        values = {"source": self.source, "date": date_of(day), "object_id": object_id}
        return "/".join([self.name, *(f"{k}={values[k]}" for k in self.partition_by)])

    def partition_values(self, folder: str) -> dict[str, str]:
        """key=value segments of a partition folder."""
        return dict(part.split("=", 1) for part in folder.split("/") if "=" in part)

    def file(self, folder: str, bucket: int) -> str:
        return f"{folder}/{self.key(bucket).name(self.extension)}"

    def data_key(self, name: str) -> FileKey | None:
        return FileKey.parse(name, self.extension)

    def may_hold_ours(self, key: FileKey) -> bool:
        """Could a file of this key hold rows of parameters we write? Not if another source wrote it,
        nor if it belongs to our own layout (same shard count and bucket count): those hold other
        parameters by construction. Files of another layout (an older version, another shard count or
        bucket count) may."""
        if key.source is not None and key.source != self.source:
            return False
        same_shards = (key.shard.count if key.shard else 1) == (self.shard.count if self.shard else 1)
        return not (key.source is not None and same_shards and key.buckets == self.buckets)

    def fill_partition_columns(self, table: pa.Table, folder: str) -> pa.Table:
        """Columns that live in the path, not the file; and the source, for files written before it was
        a column (they come back null from the format)."""
        values = self.partition_values(folder)
        for name in ("source", "object_id"):
            if name in self.partition_by:
                value = values[name] if name == "source" else int(values[name])
                column = pa.array(np.full(table.num_rows, value), self.schema.field(name).type)
                table = table.set_column(self.schema.get_field_index(name), name, column)
        source = table.column("source")
        if "source" not in self.partition_by and source.null_count:
            table = table.set_column(0, "source", source.fill_null(self.source))
        return table
