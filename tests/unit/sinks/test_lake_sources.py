"""Several sources (instances of the platform, the same parameter ids) in one lake table: what a commit
replaces, which stored files it may touch and what a slab reads back are all of its own source
(etl/sinks/lake/common.py `Replace`, Delta's `predicate`, Iceberg's `expression`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from etl.model import SCHEMAS, Series, Windows
from etl.sinks.lake.common import Replace, with_date
from etl.sinks.lake.delta_table import CHECKPOINT_EVERY
from etl.timeutil import DAY_MS, to_ms

DAY = to_ms("2026-11-01T00:00:00Z")
A, B = "plant-a", "plant-b"


def raw_rows(source: str, value: float, params=(1001, 1002), hours=range(0, 24, 6)) -> pa.Table:
    """A few raw rows per parameter on DAY: the same parameter ids and stamps whatever the source."""
    pids = [p for p in params for _ in hours]
    ts = [DAY + h * 3_600_000 for _ in params for h in hours]
    table = pa.table(
        {
            "source": [source] * len(pids),
            "object_id": [1] * len(pids),
            "param_id": pids,
            "kind": ["physical"] * len(pids),
            "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
            "value": [value] * len(pids),
        },
        schema=SCHEMAS[Series.RAW],
    )
    return with_date(table, "ts")


def windows(params=(1001, 1002), start: int = DAY, end: int = DAY + DAY_MS) -> Windows:
    n = len(params)
    return Windows(
        Series.RAW, np.asarray(params), np.ones(n), np.zeros(n), np.full(n, start), np.full(n, end)
    )


def test_a_replace_matches_the_rows_of_its_source_alone():
    rows = pa.concat_tables([raw_rows(A, 1.0), raw_rows(B, 2.0)])
    mine = Replace.of(A, windows())
    assert pc.all(pc.equal(rows.filter(pa.array(mine.matches(rows))).column("source"), A)).as_py()
    assert int(mine.matches(rows).sum()) == raw_rows(A, 1.0).num_rows
    assert int(Replace(A).matches(rows).sum()) == raw_rows(A, 1.0).num_rows  # a dimension snapshot
    assert not Replace.of(A, windows(params=(1003,))).matches(rows).any()


def test_the_statistics_of_another_sources_file_say_it_holds_nothing_to_replace():
    n = 4
    key = np.full(n, float(DAY)), np.full(n, float(DAY + DAY_MS - 1))
    pids = np.full(n, 1001.0), np.full(n, 1002.0)
    low = pa.array([A, B, A, None], pa.string())
    high = pa.array([A, B, B, None], pa.string())  # A's file, B's file, a file of both, no statistics
    assert Replace.of(A, windows()).may_match(*key, *pids, low, high).tolist() == [True, False, True, True]
    assert Replace(B).may_match(*key, *pids, low, high).tolist() == [False, True, True, True]


def test_delta_predicate_names_the_source_and_delta_rs_keeps_the_other_sources_rows(tmp_path):
    import deltalake

    from etl.sinks.lake.delta_commit import predicate

    replace = Replace.of(A, windows())
    assert predicate(replace).startswith(f"source = '{A}' AND (")
    assert predicate(Replace(A)) == f"source = '{A}'"
    uri = str(tmp_path / "raw")
    deltalake.write_deltalake(
        uri, pa.concat_tables([raw_rows(A, 1.0), raw_rows(B, 2.0)]), partition_by=["date"]
    )
    deltalake.write_deltalake(uri, raw_rows(A, 3.0), mode="overwrite", predicate=predicate(replace))
    stored = deltalake.DeltaTable(uri).to_pyarrow_table()
    values = dict(
        zip(*stored.group_by("source").aggregate([("value", "max")]).to_pydict().values(), strict=True)
    )
    assert values == {A: 3.0, B: 2.0} and stored.num_rows == 2 * raw_rows(A, 0).num_rows


def test_iceberg_expression_names_the_source():
    from pyiceberg.expressions import And, EqualTo

    from etl.sinks.lake.iceberg_commit import expression

    ranged = expression(Replace.of(A, windows()))
    assert isinstance(ranged, And) and ranged.left == EqualTo("source", A)
    assert expression(Replace(A)) == EqualTo("source", A)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_commit_replaces_and_a_slab_reads_only_its_sources_rows(tmp_path, fmt):
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    table = Lake(SinkConfig(format=fmt, path=str(tmp_path)), Storage(str(tmp_path))).series(Series.RAW)
    table.commit(raw_rows(A, 1.0), Replace.of(A, windows()))
    table.commit(raw_rows(B, 2.0), Replace.of(B, windows()))
    table.commit(raw_rows(B, 4.0), Replace.of(B, windows()))  # B again: B's rows replaced, A's kept
    stored = table.dataset().to_table()
    values = dict(
        zip(*stored.group_by("source").aggregate([("value", "max")]).to_pydict().values(), strict=True)
    )
    assert values == {A: 1.0, B: 4.0} and stored.num_rows == 2 * raw_rows(A, 0).num_rows
    for source, value in ((A, 1.0), (B, 4.0)):
        read = table.read(source, [1001], DAY, DAY + DAY_MS)
        assert read.column("source").to_pylist() == [source] * 4 and set(
            read.column("value").to_pylist()
        ) == {value}


def test_only_of_tells_a_files_own_source_from_its_bounds():
    from etl.sinks.lake.common import only_of

    assert only_of(A, A, A)
    assert not only_of(A, A, B) and not only_of(A, None, None) and not only_of(A, B, B)
    long = "monitoring.plant-a.example.com"  # bounds cut to 16 characters, the high one raised
    assert only_of(long, long[:16], long[:15] + chr(ord(long[15]) + 1))
    assert not only_of(long, long[:16], "z")


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_sources_compaction_merges_its_own_files_and_leaves_the_others(tmp_path, fmt):
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    table = Lake(SinkConfig(format=fmt, path=str(tmp_path)), Storage(str(tmp_path))).series(Series.RAW)
    for hour in (0, 6, 12):  # three appends a source: three small files each in the day
        for source, value in ((A, 1.0), (B, 2.0)):
            start = DAY + hour * 3_600_000
            table.commit(
                raw_rows(source, value, hours=[hour]), Replace.of(source, windows(start=start, end=start + 1))
            )
    before = table.dataset().to_table()
    assert [d.files for d in table.day_files(A)] == [3] and [d.files for d in table.day_files(B)] == [3]

    assert table.compact(A) == 3
    assert [d.files for d in table.day_files(A)] == [1]  # A's three merged into one
    assert [d.files for d in table.day_files(B)] == [3]  # B's untouched
    assert sum(table.files_per_day().values()) == 4
    after = table.dataset().to_table()
    keys = [("source", "ascending"), ("param_id", "ascending"), ("ts", "ascending")]
    assert after.select(before.column_names).sort_by(keys).equals(before.sort_by(keys))


def test_vacuum_waits_for_no_run_of_any_source(tmp_path):
    """`etl vacuum` deletes files no version references, which a run's files are until its commit:
    it holds the locks of every source writing the tables, not only its own."""
    from etl.errors import LockedError
    from etl.pipeline.maintenance import vacuum
    from etl.sinks.output import Output
    from tests.support.configs import make_config

    configs = {
        name: make_config("http://127.0.0.1:9", tmp_path, source={"name": name}, sink={"format": "delta"})
        for name in (A, B)
    }
    with Output(configs[B]).state_store().lock(), pytest.raises(LockedError):  # while a run of B holds it
        vacuum(configs[A], 0)
    assert vacuum(configs[A], 0).tables == 0  # B is done: no table yet, nothing to vacuum


def test_an_iceberg_reader_outlives_another_writers_expiry(tmp_path):
    """A run reads its source's stored rows (quality rows) and asks whether a slab's partitions hold
    anything it replaces from the snapshot it loaded; another source's commits meanwhile expire that
    snapshot and delete its manifests. Both answers then come from a newer snapshot, not an error."""
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    def raw(versions: int):
        lake = Lake(
            SinkConfig(format="iceberg", path=str(tmp_path), versions=versions), Storage(str(tmp_path))
        )
        return lake.series(Series.RAW)

    mine = raw(50)
    mine.commit(raw_rows(A, 1.0), Replace.of(A, windows()))
    assert mine.read(A, [1001], DAY, DAY + DAY_MS).num_rows == 4  # the run's read snapshot, loaded
    assert not mine.holds_none_of(Replace.of(A, windows()))  # the run's handle, loaded
    other = raw(2)
    for value in (2.0, 3.0, 4.0, 5.0, 6.0):  # expires the snapshots beyond the newest 2, manifests and all
        other.commit(raw_rows(B, value), Replace.of(B, windows()))
    assert len(other._load().snapshots()) <= 3
    read = mine.read(A, [1001], DAY, DAY + DAY_MS)
    assert read.num_rows == 4 and set(read.column("value").to_pylist()) == {1.0}
    assert not mine.holds_none_of(Replace.of(A, windows()))  # unknown or held: never an error
    mine.commit(raw_rows(A, 7.0), Replace.of(A, windows()))  # planned again on the newer snapshot
    stored = mine.dataset().to_table()
    values = dict(
        zip(*stored.group_by("source").aggregate([("value", "max")]).to_pydict().values(), strict=True)
    )
    assert values == {A: 7.0, B: 6.0} and stored.num_rows == 2 * raw_rows(A, 0).num_rows


def test_a_delta_writer_outlives_another_writers_expiry(tmp_path, monkeypatch):
    """A run's handle stays on the version of its last commit while another source's run commits and
    its upkeep deletes the log entries before its newest checkpoint, that version's among them. The
    run's next commit is planned on the newest version; and if the entries go between that plan and
    the commit (delta-rs then calls the handle's version invalid), it is planned again."""
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    def raw():
        lake = Lake(SinkConfig(format="delta", path=str(tmp_path), versions=2), Storage(str(tmp_path)))
        return lake.series(Series.RAW)

    def expire_behind(mine) -> None:
        other = raw()
        for value in range(2, 2 + 2 * CHECKPOINT_EVERY):
            other.commit(raw_rows(B, float(value)), Replace.of(B, windows()))
        other.maintain(0, sweep=False, source=B)
        assert not (tmp_path / "raw" / "_delta_log" / f"{mine._handle().version():020d}.json").exists()

    mine = raw()
    mine.commit(raw_rows(A, 1.0), Replace.of(A, windows()))
    expire_behind(mine)
    mine.commit(raw_rows(A, 2.0), Replace.of(A, windows()))
    stale = {"once": True}
    refresh = mine._refresh

    def late(*_: object) -> None:  # the first plan sees the stale version, as if expired right after
        if not stale.pop("once", False):
            refresh()

    monkeypatch.setattr(mine, "_refresh", late)
    expire_behind(mine)
    mine.commit(raw_rows(A, 3.0), Replace.of(A, windows()))
    stored = raw().dataset().to_table()
    values = dict(
        zip(*stored.group_by("source").aggregate([("value", "max")]).to_pydict().values(), strict=True)
    )
    assert values == {A: 3.0, B: float(1 + 2 * CHECKPOINT_EVERY)}
    assert stored.num_rows == 2 * raw_rows(A, 0).num_rows


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_columns_another_source_added_meanwhile_are_no_failure(tmp_path, fmt):
    """Two sources' runs of a newer version meet a table made before its columns: the first to commit
    adds them, and the other's commit, planned on the table as it loaded it, is planned again."""
    from etl.config import SinkConfig
    from etl.sinks.lake import Lake
    from etl.storage.atomic import Storage

    def raw():
        return Lake(SinkConfig(format=fmt, path=str(tmp_path)), Storage(str(tmp_path))).series(Series.RAW)

    def newer(rows: pa.Table) -> pa.Table:  # rows with a column the table does not have yet
        return rows.append_column(pa.field("extra", pa.float64()), pa.array([0.5] * rows.num_rows))

    mine, other = raw(), raw()
    mine.commit(raw_rows(A, 1.0), Replace.of(A, windows()))  # the table, made; this run's handle
    other.commit(newer(raw_rows(B, 2.0)), Replace.of(B, windows()))  # adds the column
    mine.commit(newer(raw_rows(A, 3.0)), Replace.of(A, windows()))
    stored = raw().dataset().to_table()
    values = dict(
        zip(*stored.group_by("source").aggregate([("value", "max")]).to_pydict().values(), strict=True)
    )
    assert values == {A: 3.0, B: 2.0} and set(stored.column("extra").to_pylist()) == {0.5}
