"""Iceberg tables (etl/sinks/lake/iceberg.py): made in one catalog commit with their partition spec
(day of the time key, then identity of the other partition columns, on the right source fields), and
written with the data files pyiceberg's own writer makes."""

from __future__ import annotations

import pytest

from etl.model import QUALITY_SCHEMA, QUALITY_TIME_KEY, SCHEMAS, Series


@pytest.mark.parametrize("partition_by", [["date"], ["date", "object_id"]])
def test_series_and_quality_tables_are_partitioned_by_day_of_their_time_key(tmp_path, partition_by):
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.sinks.lake.common import with_date
    from etl.storage.files import Storage

    lake = Lake(
        SinkConfig(format="iceberg", path=str(tmp_path), partition_by=partition_by), Storage(str(tmp_path))
    )
    lake.prepare([Series.RAW])
    for table, key in ((lake.series(Series.RAW), "ts"), (lake.quality(), QUALITY_TIME_KEY)):
        metadata = lake.series(Series.RAW).catalog.load_table(table.identifier).metadata
        schema = metadata.schema()
        fields = [
            (schema.find_column_name(f.source_id), str(f.transform), f.name) for f in metadata.spec().fields
        ]
        expected = [(key, "day", f"{key}_day")]
        if "object_id" in partition_by:
            expected.append(("object_id", "identity", "object_id"))
        assert fields == expected
        assert [f.name for f in schema.fields] == with_date(
            (SCHEMAS[Series.RAW] if key == "ts" else QUALITY_SCHEMA).empty_table(), key
        ).column_names


def test_a_reference_table_is_not_partitioned(tmp_path):
    import pyarrow as pa

    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.files import Storage

    lake = Lake(SinkConfig(format="iceberg", path=str(tmp_path)), Storage(str(tmp_path)))
    table = lake.dimension("units")
    assert table.snapshot(pa.table({"source": ["demo"], "id": [1]}), "demo")
    assert table.catalog.load_table(table.identifier).metadata.spec().is_unpartitioned()
    assert table.dataset().to_table().num_rows == 1


@pytest.mark.parametrize("partition_by", [["date"], ["date", "object_id"]])
def test_data_files_are_those_pyiceberg_writes(tmp_path, partition_by):
    """Rows of the table's own schema are written without pyiceberg's writer (which works out the
    schema, settings and statistics plan again for every file): the same rows, schema and records,
    but dictionaries only on the columns etl's Parquet datasets give one (not timestamps, values)."""
    import itertools
    import uuid

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.sinks.lake.common import with_date
    from etl.storage.files import Storage

    start = 1_793_491_200_000  # 2026-11-01
    stamps = np.sort(np.random.default_rng(1).integers(start, start + 2 * 86_400_000, 500))
    params = np.repeat(np.arange(1001, 1011), 500)
    values = np.random.default_rng(2).random(len(params))
    values[::7] = np.nan
    rows = pa.table(
        {
            "source": ["demo"] * len(params),
            "object_id": params // 10,
            "param_id": params,
            "kind": ["measure"] * len(params),
            "ts": pa.array(np.tile(stamps, 10), pa.timestamp("ms", tz="UTC")),
            "value": pa.array(values, mask=np.arange(len(params)) % 11 == 0),
        }
    )
    rows = with_date(rows, "ts")
    lake = Lake(
        SinkConfig(format="iceberg", path=str(tmp_path), partition_by=partition_by), Storage(str(tmp_path))
    )
    table = lake.series(Series.RAW)
    table.prepare(rows.schema)
    handle = table._handle()
    ours = sorted(table.write_files(rows), key=lambda f: str(f.partition))
    theirs = sorted(
        _dataframe_to_data_files(
            handle.metadata, rows, handle.io, write_uuid=uuid.uuid4(), counter=itertools.count()
        ),
        key=lambda f: str(f.partition),
    )
    assert len(ours) == len(theirs) == (2 if partition_by == ["date"] else 4)
    for a, b in zip(ours, theirs, strict=True):
        for field in (
            "content",
            "file_format",
            "partition",
            "record_count",
            "value_counts",
            "null_value_counts",
            "nan_value_counts",
            "lower_bounds",
            "upper_bounds",
            "split_offsets",
        ):
            assert getattr(a, field) == getattr(b, field), field
        assert a.file_path.rsplit("/", 1)[0] == b.file_path.rsplit("/", 1)[0]  # the partition's folder
        mine, pyiceberg = (pq.ParquetFile(f.file_path.removeprefix("file://")) for f in (a, b))
        assert mine.schema_arrow == pyiceberg.schema_arrow
        assert mine.metadata.metadata == pyiceberg.metadata.metadata
        assert repr(mine.read().to_pylist()) == repr(pyiceberg.read().to_pylist())  # NaN as NaN
        encoded = {
            mine.schema_arrow.names[i]: "PLAIN_DICTIONARY"
            in str(mine.metadata.row_group(0).column(i).encodings)
            or "RLE_DICTIONARY" in str(mine.metadata.row_group(0).column(i).encodings)
            for i in range(mine.metadata.num_columns)
        }
        assert encoded == {
            "source": True,
            "object_id": True,
            "param_id": True,
            "kind": True,
            "ts": False,
            "value": False,
            "date": True,
        }
        assert a.file_size_in_bytes < b.file_size_in_bytes


def test_rows_larger_than_the_target_file_size_are_split_by_pyiceberg(tmp_path):
    import numpy as np
    import pyarrow as pa

    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.sinks.lake.common import with_date
    from etl.storage.files import Storage

    n = 20_000
    rows = pa.table(
        {
            "source": ["demo"] * n,
            "object_id": np.full(n, 100),
            "param_id": np.full(n, 1001),
            "kind": ["measure"] * n,
            "ts": pa.array(1_793_491_200_000 + np.arange(n) * 1000, pa.timestamp("ms", tz="UTC")),
            "value": np.random.default_rng(3).random(n),
        }
    )
    rows = with_date(rows, "ts")
    lake = Lake(SinkConfig(format="iceberg", path=str(tmp_path)), Storage(str(tmp_path)))
    table = lake.series(Series.RAW)
    table.prepare(rows.schema)
    assert len(table.write_files(rows)) == 1
    with table._handle().transaction() as txn:
        txn.set_properties({"write.target-file-size-bytes": str(rows.nbytes // 3)})
    files = table.write_files(rows)
    assert len(files) >= 3 and sum(f.record_count for f in files) == n
