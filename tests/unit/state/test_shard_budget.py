"""The shards' budget file (etl/state/budget.py): shards running at once each find their place among
the live ones and what the others have in flight; one that ends leaves, one that crashed expires."""

from __future__ import annotations

import json
import time

from etl.client.budget import Part
from etl.client.concurrency import FixedLimit
from etl.state.budget import BUDGET_FILE, EARLY, RENEW, ShardBudget
from etl.storage.atomic import Storage


def shard(storage: Storage, label: str, limit: int = 8, lease: float = 120.0) -> ShardBudget:
    return ShardBudget(storage, label, Part(FixedLimit(limit)), lease)


def test_shards_that_run_at_once_split_the_limit_they_share(tmp_path):
    storage = Storage(str(tmp_path))
    shards = [shard(storage, f"s{i}of3") for i in range(3)]
    for s in shards:
        s.renew()
    for s in shards:
        s.renew()  # each now sees the others
    assert [s.part.current for s in shards] == [3, 3, 2]
    entries = json.loads(storage.read(BUDGET_FILE))
    assert sorted(entries) == ["s0of3", "s1of3", "s2of3"] and entries["s2of3"]["limit"] == 8
    shards[0].leave()
    shards[1].renew()
    assert shards[1].part.current == 4  # half of 8: s2of3 and itself
    shards[1].leave()
    shards[2].leave()
    assert storage.read(BUDGET_FILE) is None  # the last one takes the file with it


def test_a_shard_learns_what_the_others_have_in_flight(tmp_path):
    storage = Storage(str(tmp_path))
    a, b = shard(storage, "s0of2"), shard(storage, "s1of2")
    a.renew()
    for _ in range(3):
        b.part.succeeded(0.0, 0.1, 5)
    b.renew()
    a.renew()
    assert a.part.others == 5 and b.part.others == 0


def test_a_crashed_shards_entry_expires_after_the_lease(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path))
    crashed, alive = shard(storage, "s0of2", lease=10.0), shard(storage, "s1of2", lease=10.0)
    crashed.renew()
    alive.renew()
    assert alive.part.current == 4
    now = time.time()
    monkeypatch.setattr("etl.state.budget.time.time", lambda: now + 11.0)
    alive.renew()
    assert alive.part.current == 8 and sorted(json.loads(storage.read(BUDGET_FILE))) == ["s1of2"]


def test_a_shard_counts_its_siblings_not_seen_yet_for_a_few_seconds(tmp_path, monkeypatch):
    storage = Storage(str(tmp_path))
    first = ShardBudget(storage, "s0of4", Part(FixedLimit(8)), 120.0, lambda: 5, siblings=4)
    first.renew()
    assert first.part.current == 2  # the others start within seconds: 8 among 4
    assert first.wait() == EARLY < RENEW  # and their limits grow fastest then: news more often
    now = time.monotonic()
    monkeypatch.setattr("etl.state.budget.time.monotonic", lambda: now + 60.0)
    first.renew()
    assert first.part.current == 8  # alone after all
    assert first.wait() == RENEW
    assert json.loads(storage.read(BUDGET_FILE))["s0of4"]["wants"] == 5


def test_an_entry_another_version_wrote_is_read_for_what_it_says(tmp_path):
    storage = Storage(str(tmp_path))
    storage.write_atomic(
        BUDGET_FILE,
        json.dumps(
            {"s1of2": {"limit": "x", "wants": None, "baseline": [0.1], "expires": time.time() + 60}}
        ).encode(),
    )
    mine = shard(storage, "s0of2")
    mine.renew()
    assert mine.part.current == 4  # 8 between the two, what the other wants unknown: one at least
