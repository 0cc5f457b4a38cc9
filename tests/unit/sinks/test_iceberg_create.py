"""Iceberg tables (etl/sinks/lake/iceberg_table.py, iceberg_files.py): made in one catalog commit with
their partition spec (day of the time key, then identity of the other partition columns, on the right
source fields), and written with the data files pyiceberg's own writer makes."""

from __future__ import annotations

import pytest

from etl.model import QUALITY_SCHEMA, QUALITY_TIME_KEY, SCHEMAS, Series


@pytest.mark.parametrize("partition_by", [["date"], ["date", "object_id"]])
def test_series_and_quality_tables_are_partitioned_by_day_of_their_time_key(tmp_path, partition_by):
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.sinks.lake.common import with_date
    from etl.storage.atomic import Storage

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
    from etl.storage.atomic import Storage

    lake = Lake(SinkConfig(format="iceberg", path=str(tmp_path)), Storage(str(tmp_path)))
    table = lake.dimension("units")
    assert table.snapshot(pa.table({"source": ["demo"], "id": [1]}), "demo")
    assert table.catalog.load_table(table.identifier).metadata.spec().is_unpartitioned()
    assert table.dataset().to_table().num_rows == 1


@pytest.mark.parametrize("partition_by", [["date"], ["date", "object_id"]])
def test_data_files_are_those_pyiceberg_writes(tmp_path, partition_by):
    """Rows of the table's own schema are written without pyiceberg's writer (`write_file`, which works
    out the schema, settings and statistics plan again for every file): the same rows, schema and
    records, but dictionaries only on the columns etl's Parquet datasets give one (not timestamps,
    values)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.sinks.lake.common import with_date
    from etl.sinks.lake.iceberg_files import _pyiceberg_files
    from etl.storage.atomic import Storage

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
    theirs = sorted(_pyiceberg_files(handle.metadata, handle.io, rows), key=lambda f: str(f.partition))
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
    from etl.storage.atomic import Storage

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


def test_a_table_of_nested_columns_gets_the_schema_pyiceberg_gives_it(tmp_path):
    """Field ids from pyiceberg's public conversion (every field numbered, then fresh ids): the same
    schema as pyiceberg's own `create_table` of the arrow schema."""
    import pyarrow as pa

    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    point = pa.struct([("timestmp", pa.timestamp("us", tz="UTC")), ("value", pa.float64())])
    schema = pa.schema(
        [
            ("source", pa.string()),
            ("id", pa.int64(), False),
            ("points", pa.list_(point)),
            ("tags", pa.map_(pa.string(), pa.string())),
            ("where", pa.struct([("x", pa.float64()), ("names", pa.large_list(pa.string()))])),
        ]
    )
    lake = Lake(SinkConfig(format="iceberg", path=str(tmp_path)), Storage(str(tmp_path)))
    table = lake.dimension("nested")
    table.prepare(schema)
    ours = table._handle().schema()
    theirs = table.catalog.create_table(("etl", "theirs"), schema=schema).schema()
    assert ours == theirs


def test_rows_that_do_not_fit_the_table_are_refused_before_any_file_is_written(tmp_path):
    import pyarrow as pa
    import pytest

    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.sinks.lake.iceberg_files import check_fits
    from etl.storage.atomic import Storage

    lake = Lake(SinkConfig(format="iceberg", path=str(tmp_path)), Storage(str(tmp_path)))
    table = lake.dimension("units")
    table.prepare(pa.schema([("source", pa.string()), ("id", pa.int64(), False), ("scale", pa.float64())]))
    metadata = table._handle().metadata
    check_fits(metadata, pa.schema([("id", pa.int32(), False), ("source", pa.large_string())]))  # promoted
    for schema, reason in (
        (pa.schema([("source", pa.string()), ("id", pa.int64(), False), ("new", pa.int8())]), "lacks: new"),
        (pa.schema([("source", pa.string()), ("id", pa.int64())]), "id is required"),
        (pa.schema([("source", pa.string()), ("scale", pa.float64())]), "id is required"),
        (pa.schema([("source", pa.int64()), ("id", pa.int64(), False)]), "source"),
    ):
        with pytest.raises(ValueError, match=reason):
            check_fits(metadata, schema)
    with pytest.raises(Exception, match="cannot commit to the Iceberg table etl.dimensions_units"):
        table.commit(pa.table({"source": ["a"], "id": [1], "new": [1]}), None)
    assert not list((tmp_path / "etl" / "dimensions_units").rglob("*.parquet"))
