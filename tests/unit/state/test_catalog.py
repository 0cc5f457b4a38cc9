"""The fleet's catalog file (etl/state/catalog.py): written and read a row group at a time, one file per
login, used only for the selection it was listed for; a write that fails keeps the old file, and a file
that cannot be read is rebuilt (the run lists every object again)."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pytest

from etl.state.catalog import ROW_GROUP, Catalog, Listings, login_key
from etl.storage.atomic import Storage

PLATFORM = "http://127.0.0.1:8765/sem-restservices"
LISTINGS = Listings(np.array([1, 2, 3]), np.array([10, 10, 10]), np.array([20, 30, 40]))


def _pages(count: int, per: int = 250):
    for first in range(0, count, per):
        ids = np.arange(first, min(first + per, count), dtype=np.int64) + 1001
        yield pa.table(
            {
                "name": pa.array([f"p{i}" for i in ids.tolist()]),
                "_id": ids,
                "_object": ids // 1000,
                "_kind": pa.array(np.zeros(len(ids), np.int8)),
            }
        )


def _catalog(tmp_path, username: str = "demo") -> Catalog:
    return Catalog(Storage(str(tmp_path)), login_key(PLATFORM, username))


def test_a_catalog_reads_back_what_was_written_a_row_group_at_a_time(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.write("selection", 10, LISTINGS, _pages(10_000))
    with catalog.read("selection") as kept:
        assert kept is not None and kept.written == 10 and kept.rows == 10_000
        for name in ("object_id", "listed", "due"):
            assert getattr(kept.listings, name).tolist() == getattr(LISTINGS, name).tolist()
        batches = list(kept.batches())
        assert max(b.num_rows for b in batches) <= ROW_GROUP and len(batches) >= 10_000 // ROW_GROUP
        ids = np.concatenate([b.column("_id").to_numpy() for b in batches])
        assert ids.tolist() == list(range(1001, 11_001))
        assert batches[0].column("name")[0].as_py() == "p1001"
    with catalog.read("another selection") as kept:
        assert kept is None  # listed for other objects, kinds or tags: every object is listed again


def test_an_empty_fleet_s_catalog_still_says_which_objects_were_listed(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.write("selection", 10, LISTINGS, iter(()))
    with catalog.read("selection") as kept:
        assert kept is not None and kept.rows == 0 and kept.listings.object_id.tolist() == [1, 2, 3]


def test_one_login_never_reads_what_another_listed(tmp_path):
    _catalog(tmp_path, "demo").write("selection", 10, LISTINGS, _pages(10))
    with _catalog(tmp_path, "restricted").read("selection") as kept:
        assert kept is None
    assert login_key(PLATFORM, "demo") != login_key(PLATFORM, "restricted")
    assert "demo" not in login_key(PLATFORM, "demo")  # the file names no login


def test_a_failed_write_keeps_the_old_catalog_and_a_damaged_one_is_rebuilt(tmp_path, caplog):
    catalog = _catalog(tmp_path)
    catalog.write("selection", 10, LISTINGS, _pages(600))

    def failing():
        yield from _pages(300)
        raise OSError(28, "No space left on device")

    with pytest.raises(Exception, match="No space left"):
        catalog.write("selection", 20, LISTINGS, failing())
    with catalog.read("selection") as kept:
        assert kept is not None and kept.written == 10 and kept.rows == 600
    assert [p.name for p in (tmp_path / "catalog").iterdir()] == [catalog.rel.split("/")[1]]  # no temp file

    (tmp_path / catalog.rel).write_bytes(b"PAR1 not a catalog")
    with caplog.at_level(logging.WARNING), catalog.read("selection") as kept:
        assert kept is None
    assert f"the catalog {tmp_path}/{catalog.rel} cannot be read" in caplog.text


def test_forget_takes_parameters_out_and_keeps_the_rest(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.write("selection", 10, LISTINGS, _pages(600))
    assert catalog.forget(np.array([1001, 1500, 99]), "selection") == 2
    with catalog.read("selection") as kept:
        assert kept is not None and kept.rows == 598 and kept.written == 10
        ids = np.concatenate([b.column("_id").to_numpy() for b in kept.batches()])
        assert 1001 not in ids and 1500 not in ids and 1002 in ids
