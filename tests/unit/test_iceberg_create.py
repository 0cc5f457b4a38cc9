"""An Iceberg table is made in one catalog commit with its partition spec (etl/sinks/lake/iceberg.py):
day(time key), then identity of the other partition columns, on the right source fields."""

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
