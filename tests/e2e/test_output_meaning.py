"""What docs/output.md says the output means, checked on a run's files (issue 54): an average's and a
candle's `ts` is the start of its 30-minute bucket (its figures are those of the raw points in
`[ts, ts + 30 min)`), `kind` takes the parameter kinds, `source` is the host of base_url when
source.name is unset, and the columns etl reads in the dimension tables are there."""

from __future__ import annotations

import duckdb
import pytest

from etl.config import SourceConfig
from tests.support.configs import make_config
from tests.support.pipeline import run
from tools import output_reference as page


@pytest.fixture(scope="module")
def out(emulator, tmp_path_factory):
    folder = tmp_path_factory.mktemp("meaning") / "out"
    run(make_config(emulator.base_url, folder))
    return folder


def files(out, name: str) -> str:
    return f"read_parquet('{out}/{name}/**/*.parquet', hive_partitioning=0)"


def test_the_columns_written_are_the_pages(out):
    con = duckdb.connect()
    for series, schema in page.SCHEMAS.items():
        assert con.sql(f"select * from {files(out, str(series))}").columns == schema.names
    assert con.sql(f"select * from {files(out, 'quality')}").columns == list(page.QUALITY_COLUMNS)


def test_an_aggregate_is_stamped_at_the_start_of_its_bucket(out):
    figures = duckdb.sql(
        f"""
        select count(*), max(abs(a.value - r.mean)), max(abs(c.open - r.first) + abs(c.high - r.high)
               + abs(c.low - r.low) + abs(c.close - r.last)),
               count(*) filter (where epoch_ms(a.ts) % 1800000 != 0)
        from {files(out, "average")} a join {files(out, "candles")} c using (param_id, ts)
        join (select param_id, time_bucket(interval 30 minutes, ts) as ts, avg(value) as mean,
                     arg_min(value, ts) as first, max(value) as high, min(value) as low,
                     arg_max(value, ts) as last
              from {files(out, "raw")} group by all) r using (param_id, ts)
        """
    ).fetchall()[0]
    buckets, mean_off, candle_off, unaligned = figures
    assert buckets > 100 and unaligned == 0
    assert mean_off < 1e-9 and candle_off < 1e-9, figures


def test_kind_and_the_default_source_are_what_the_page_says(out, emulator):
    default = SourceConfig(base_url=emulator.base_url, username="u", password="p").name  # type: ignore[arg-type]
    for name in ("raw", "average", "candles", "quality"):
        kinds, sources = duckdb.sql(
            f"select list(distinct kind), list(distinct source) from {files(out, name)}"
        ).fetchall()[0]
        assert set(kinds) == {str(k) for k in page.KINDS}, (name, kinds)
        assert sources == [default] == ["127.0.0.1"], (name, sources)


def test_the_dimension_columns_etl_reads_are_there(out):
    columns = {
        name: duckdb.sql(f"select * from '{out}/dimensions/{name}/*.parquet'").columns
        for name in page.DIMENSIONS
    }
    assert all(cols[0] == "source" for cols in columns.values()), columns
    assert {"id", "shortname"} <= set(columns["objects"]) and {"id", "name", "unit"} <= set(
        columns["parameters"]
    )
    assert {"object_id", "deviceconnect"} <= set(columns["units"])
