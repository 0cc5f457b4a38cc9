"""Which objects a run lists (etl/pipeline/catalog.py): hourly runs list about a 24th each, every object
again before its listing is `select.refresh` old; new objects at once; after a pause all at once, then
spread again."""

from __future__ import annotations

import numpy as np

from etl.pipeline.catalog import due, noted
from etl.timeutil import DAY_MS, HOUR_MS

T = 1_794_268_800_000


def _runs(objects: np.ndarray, times: list[int], refresh: int = DAY_MS):
    """Each run's mask of the objects it lists."""
    listings, last = None, None
    for now in times:
        listing = (
            np.ones(len(objects), bool)
            if listings is None
            else due(objects, listings, now, now - last, refresh)
        )
        yield listing
        listings, last = noted(objects, listings, listing, now, refresh), now


def test_hourly_runs_list_a_24th_each_and_every_object_within_the_bound():
    objects = np.arange(1, 241, dtype=np.int64)
    times = [T + h * HOUR_MS for h in range(72)]
    shares, listed_at = [], {}
    for listing, now in zip(_runs(objects, times), times, strict=True):
        shares.append(int(listing.sum()))
        for o in objects[listing].tolist():
            assert now - listed_at.get(o, now) <= DAY_MS, (o, now)  # listed again within the bound
            listed_at[o] = now
    assert shares[0] == 240  # the first run lists them all
    # then about 240/24 a run (each object every 23 runs), one run in 23 up to 2.5 times that: the first
    # run after a full listing takes the dues of an hour and a half, and its group stays together
    assert 10 <= np.mean(shares[1:]) <= 11 and max(shares[1:]) <= 25, shares
    assert all(now - t < DAY_MS for t in listed_at.values() for now in [times[-1]])


def test_a_new_object_is_listed_at_once_and_a_clock_gone_back_lists_again():
    objects = np.arange(1, 25, dtype=np.int64)
    listings = noted(objects, None, np.ones(24, bool), T, DAY_MS)
    grown = np.arange(1, 26, dtype=np.int64)
    assert grown[due(grown, listings, T + HOUR_MS, HOUR_MS, DAY_MS)].tolist()[-1] == 25
    assert due(objects, listings, T - HOUR_MS, 0, DAY_MS).all()  # listed in the clock's future
    assert not due(objects, listings, T - 999, 0, DAY_MS).any()  # two runs a moment apart: not so


def test_after_a_pause_every_object_is_listed_and_their_next_listings_are_spread():
    objects = np.arange(1, 49, dtype=np.int64)
    times = [T, T + HOUR_MS, T + 3 * DAY_MS, T + 3 * DAY_MS + HOUR_MS, T + 3 * DAY_MS + 2 * HOUR_MS]
    shares = [int(listing.sum()) for listing in _runs(objects, times)]
    assert shares[0] == 48 and shares[2] == 48  # the first run, and the run after a pause past the bound
    assert shares[3] <= 6 and shares[4] <= 6  # not all again an hour later


def test_a_shorter_refresh_holds_at_once():
    objects = np.arange(1, 25, dtype=np.int64)
    listings = noted(objects, None, np.ones(24, bool), T, DAY_MS)
    assert due(objects, listings, T + 3 * HOUR_MS, HOUR_MS, 4 * HOUR_MS).all()
