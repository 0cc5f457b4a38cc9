"""The streaming file rewrite equals a plain in-memory merge, whatever the batch boundaries, the feeds
and a concurrent change of the file in between."""

from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl.model import SCHEMAS, ParamKind, Series, Window, Windows
from etl.sinks import formats
from etl.sinks.formats import CsvFormat, ParquetFormat
from etl.sinks.layout import Layout
from etl.sinks.rewrite import FileRewrite, Ranges
from etl.storage.atomic import Storage

T0 = 1_793_491_200_000
SCHEMA = SCHEMAS[Series.RAW]
PIDS = [11, 12, 13, 14, 15]


def rows(points: set[tuple[int, int]], tag: float) -> pa.Table:
    pairs = sorted(points)
    return pa.table(
        {
            "source": ["s"] * len(pairs),
            "object_id": [1] * len(pairs),
            "param_id": [p for p, _ in pairs],
            "kind": ["physical"] * len(pairs),
            "ts": pa.array([T0 + t for _, t in pairs], SCHEMA.field("ts").type),
            "value": [tag + t for _, t in pairs],
        },
        schema=SCHEMA,
    )


def layout(fmt) -> Layout:
    return Layout(Series.RAW, ["date"], fmt.extension, "s")


def reference(old: set, feeds: list[tuple[list[tuple[int, int, int]], set]]) -> list[tuple[int, int, float]]:
    kept = {(p, t, 0.0 + t) for p, t in old}
    for ranges, new in feeds:
        kept = {(p, t, v) for p, t, v in kept if not any(q == p and s <= t < e for q, s, e in ranges)}
        kept |= {(p, t, 1000.0 + t) for p, t in new}
    return sorted(kept)


points = st.sets(st.tuples(st.sampled_from(PIDS), st.integers(0, 40)), max_size=60)


@st.composite
def feeds(draw):
    """Ascending groups of parameters, each with ranges and new points inside them."""
    chosen = sorted(draw(st.sets(st.sampled_from(PIDS), max_size=5)))
    out, i = [], 0
    while i < len(chosen):
        size = draw(st.integers(1, 3))
        group = chosen[i : i + size]
        i += size
        ranges = []
        for p in group:
            for _ in range(draw(st.integers(1, 2))):
                s = draw(st.integers(0, 40))
                ranges.append((p, s, s + draw(st.integers(1, 15))))
        new = {(p, t) for p, s, e in ranges for t in range(s, e) if draw(st.booleans())}
        out.append((ranges, new))
    return out


@pytest.mark.parametrize("fmt", [ParquetFormat(), CsvFormat()], ids=["parquet", "csv"])
@settings(max_examples=120, deadline=None)
@given(old=points, plan=feeds(), batch=st.integers(1, 7))
def test_rewrite_equals_a_plain_merge(fmt, old, plan, batch):
    formats.READ_BATCH_ROWS = batch
    formats.ROW_GROUP_ROWS = batch + 1
    try:
        with tempfile.TemporaryDirectory() as folder:
            storage, lay = Storage(folder), layout(fmt)
            rel = f"raw/date=2026-11-01/part-s-b0of8{fmt.extension}"
            if old:
                storage.write_atomic(rel, fmt.encode(rows(old, 0.0).select(lay.file_schema.names)))
            rewrite = FileRewrite(storage, fmt, lay, rel)
            for ranges, new in plan:
                windows = [Window(p, 1, ParamKind.PHYSICAL, Series.RAW, T0 + s, T0 + e) for p, s, e in ranges]
                rewrite.feed(rows(new, 1000.0), Ranges.of(Windows.of(Series.RAW, windows)))
            rewrite.finish()
            want = reference(old, plan)
            data = storage.read(rel)
            got = [] if data is None else fmt.decode(data, SCHEMA, rel)
            got = (
                []
                if data is None
                else list(
                    zip(
                        got.column("param_id").to_pylist(),
                        [t - T0 for t in got.column("ts").cast(pa.int64()).to_pylist()],
                        got.column("value").to_pylist(),
                        strict=True,
                    )
                )
            )
            assert got == want
            assert not [f for f in storage.find() if f.endswith(".tmp")]
    finally:
        formats.READ_BATCH_ROWS, formats.ROW_GROUP_ROWS = 1 << 16, 1 << 18


def test_a_file_changed_during_the_rewrite_keeps_both_changes(tmp_path):
    """Another writer removes its parameter's rows while ours are being merged: the commit sees the
    change and merges our rows into the new version instead of overwriting it."""
    fmt, storage = ParquetFormat(), Storage(str(tmp_path))
    lay = layout(fmt)
    rel = "raw/date=2026-11-01/part-s-b0of8.parquet"
    storage.write_atomic(
        rel, fmt.encode(rows({(11, 1), (12, 2), (13, 3)}, 0.0).select(lay.file_schema.names))
    )
    rewrite = FileRewrite(storage, fmt, lay, rel)
    windows = [Window(12, 1, ParamKind.PHYSICAL, Series.RAW, T0, T0 + 10)]
    rewrite.feed(rows({(12, 5)}, 1000.0), Ranges.of(Windows.of(Series.RAW, windows)))
    # meanwhile: parameter 13 is taken out by someone else
    storage.write_atomic(rel, fmt.encode(rows({(11, 1), (12, 2)}, 0.0).select(lay.file_schema.names)))
    assert rewrite.finish()
    got = fmt.decode(storage.read(rel), SCHEMA, rel)
    assert list(zip(got.column("param_id").to_pylist(), got.column("value").to_pylist(), strict=True)) == [
        (11, 1.0),
        (12, 1005.0),
    ]
    assert not [f for f in storage.find() if f.endswith(".tmp")]


def test_ranges_mask_matches_a_plain_loop():
    """Rows sorted by parameter (a file's: bounds by runs of a parameter) and in any order (a lake
    table's: a search per row), parameters with several ranges."""
    rng = np.random.default_rng(1)
    table = rows(
        {(int(p), int(t)) for p, t in zip(rng.choice(PIDS, 200), rng.integers(0, 50, 200), strict=True)}, 0
    )
    spans = [
        (int(p), int(s), int(s) + int(n))
        for p, s, n in zip(rng.choice(PIDS, 9), rng.integers(0, 50, 9), rng.integers(0, 20, 9), strict=True)
    ]
    ranges = Ranges.of(
        Windows.of(
            Series.RAW, [Window(p, 1, ParamKind.PHYSICAL, Series.RAW, T0 + s, T0 + e) for p, s, e in spans]
        )
    )
    want = [
        any(q == p and s <= t - T0 < e for q, s, e in spans)
        for p, t in zip(
            table.column("param_id").to_pylist(), table.column("ts").cast(pa.int64()).to_pylist(), strict=True
        )
    ]
    assert ranges.mask(table).tolist() == want
    shuffled = rng.permutation(table.num_rows)
    assert ranges.mask(table.take(shuffled)).tolist() == [want[i] for i in shuffled]


def test_a_writer_of_wide_rows_cuts_row_groups_by_bytes(tmp_path):
    """40,000 rows of 1 kB: under the 64k-row bound, over the byte bound several times; the writer
    hands a row group on each time its rows pass the byte bound, and holds no more than that."""
    import pyarrow.parquet as pq

    schema = pa.schema([("record", pa.string())])
    path = tmp_path / "wide.parquet"
    writer = ParquetFormat().writer(str(path), schema)
    for _ in range(40):
        writer.write(pa.table({"record": ["x" * 1000] * 1000}, schema=schema))
    writer.close()
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_rows == 40_000
    largest = max(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    assert metadata.num_row_groups > 1 and largest * 1000 < formats.ROW_GROUP_BYTES + 1_100_000


def test_a_dimension_table_is_converted_in_small_pages_and_written_in_row_groups_of_a_thousand(tmp_path):
    """2,600 records (a field null in the first pages and text later, a number that turns into a
    record): pages of 250 records, row groups of 1,000, every record once, one type per column."""
    import pyarrow.parquet as pq

    from etl.pipeline import dimensions

    rows = dimensions.Rows("parameters")
    records = [
        {"id": i, "tagName": None if i < 600 else f"t{i}", "extra": i if i < 2000 else {"a": i}}
        for i in range(2600)
    ]
    for lo in range(0, len(records), 700):
        rows.add(records[lo : lo + 700])
    assert len(rows._pages) == 10  # converted 250 at a time; the last 100 wait for the write
    rows.write(Storage(str(tmp_path)), ParquetFormat(), "dimensions/parameters/demo.parquet", "demo")
    parquet = pq.ParquetFile(tmp_path / "dimensions/parameters/demo.parquet")
    groups = [parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)]
    assert groups == [1000, 1000, 600]
    table = parquet.read()
    assert table.column("id").to_pylist() == list(range(2600))
    assert table.schema.field("tag_name").type == pa.string()
    assert table.column("tag_name").to_pylist()[599:601] == [None, "t600"]
    assert table.schema.field("extra").type == pa.string()  # numbers and records: JSON text
