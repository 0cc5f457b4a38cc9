"""Reading a Parquet file for a few parameters skips the row groups whose statistics hold none of them."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from etl.sinks.formats import ParquetFormat


def test_only_the_row_groups_that_may_hold_the_parameters_are_read():
    ids = np.repeat(np.arange(10, dtype=np.int64), 100)  # sorted by parameter, as etl writes
    table = pa.table({"param_id": ids, "value": np.arange(len(ids), dtype=np.float64)})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=250)  # 4 row groups: ids 0-2, 2-4, 5-7, 7-9
    schema = table.schema
    fmt = ParquetFormat()

    def read(wanted):
        buffer.seek(0)
        rows = pa.concat_tables([schema.empty_table(), *fmt.batches(buffer, schema, "test", wanted)])
        return rows.num_rows, sorted(set(rows.column("param_id").to_pylist()))

    assert read(None) == (1000, list(range(10)))
    assert read(np.array([3])) == (250, [2, 3, 4])
    assert read(np.array([9, 0])) == (500, [0, 1, 2, 7, 8, 9])
    assert read(np.array([42])) == (0, [])
