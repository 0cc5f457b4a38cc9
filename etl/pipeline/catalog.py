"""Which objects a run lists the parameters of, the rest kept from the fleet's catalog (etl/state/catalog.py).

A run always reads the object list (one paged listing). It lists the parameters of the objects its
catalog does not know and of those due; the others' come from the catalog. An object listed at `t` is
due again at `t + select.refresh`, and is listed by the last run before then: a run lists it when its
due time comes before the next run would, the next run being taken to come as long after this one as
this one came after the last, give or take half of that (runs do not start on the dot). Hourly runs
list each object again every 23 hours with the default 24h. When a run lists every object (the first, a forced one, one after a long pause), their next
listings are spread evenly over `select.refresh`, so that each later run lists a like share instead of
all of them again at once.

Parameters go from the catalog when their object's listing no longer shows them (or no longer selects
them), when their object is no longer in the object list, and when their series answer 404
(`forget`): each is named in the run's summary. A new parameter of a known object is found at its
object's next listing; the plan fetches the whole window of a parameter without checkpoints.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import orjson

from etl.config import Config, SelectConfig
from etl.state import StateStore
from etl.state.catalog import Catalog, Listings, login_key
from etl.timeutil import duration_text, iso

log = logging.getLogger(__name__)

GONE_NAMED = 10  # parameter ids a summary line names at most (the JSON record holds up to 50)
# The server's clock is read from a Date header, to the second: a listing this far in its future means
# the clock went back, not that two runs read it a moment apart.
CLOCK_SLACK = 60_000


@dataclass(frozen=True)
class CatalogOptions:
    """How a run uses the catalog: where it is, the server's clock, `select.refresh`, whether every object
    is listed whatever the catalog says (`full`), and whether the run writes it back (not a dry run)."""

    store: Catalog
    now: int
    refresh: int
    full: bool = False
    save: bool = True


class CatalogRecord(TypedDict):
    objects: int
    objects_listed: int
    listed_all: str | None  # why every object was listed: "asked", "none kept", "all due"; None: not all
    oldest_listing: str | None
    age_seconds: float | None
    refresh_seconds: float
    gone: list[int]
    gone_count: int


@dataclass
class CatalogFigures:
    """What a run did with the catalog: for its summary and `etl plan`."""

    objects: int = 0  # objects whose parameters the run knows
    listed: int = 0  # of those, objects whose parameters it listed
    kept: bool = False  # a catalog was read (else every object was listed)
    forced: bool = False  # every object listed because the run was asked to
    oldest: int | None = None  # the oldest listing kept from the catalog (epoch ms)
    now: int = 0  # the server's clock when it was read
    refresh: int = 0  # select.refresh
    gone: list[int] = field(default_factory=list)  # parameters taken out of the catalog, sorted

    def add_gone(self, ids: list[int]) -> None:
        self.gone = sorted(set(self.gone) | set(ids))

    def as_dict(self) -> CatalogRecord:
        age = None if self.oldest is None else max(0, self.now - self.oldest)
        every = self.listed == self.objects
        return {
            "objects": self.objects,
            "objects_listed": self.listed,
            "listed_all": ("asked" if self.forced else "all due" if self.kept else "none kept")
            if every
            else None,
            "oldest_listing": None if self.oldest is None else iso(self.oldest),
            "age_seconds": None if age is None else age / 1000,
            "refresh_seconds": self.refresh / 1000,
            "gone": self.gone[:50],
            "gone_count": len(self.gone),
        }

    def text(self) -> str:
        return catalog_text(self.as_dict())

    def gone_text(self) -> str:
        """One line naming the parameters taken out (empty: none)."""
        if not self.gone:
            return ""
        named = ", ".join(map(str, self.gone[:GONE_NAMED]))
        more = f" and {len(self.gone) - GONE_NAMED} more" if len(self.gone) > GONE_NAMED else ""
        return (
            f"{len(self.gone)} parameter(s) no longer listed or served (404): {named}{more}; "
            "taken out of the catalog, no longer asked for"
        )


_ALL = {
    "asked": "as asked",
    "none kept": "no catalog kept yet for this login and selection",
    "all due": "every one due",
}


def catalog_text(record: CatalogRecord) -> str:
    """One line of a run's summary or plan: which objects' parameters were listed, how old the oldest
    listing kept is."""
    if record["listed_all"] is not None:
        return f"the parameters of all {record['objects']} objects listed ({_ALL[record['listed_all']]})"
    age = record["age_seconds"]
    oldest = f"; the oldest listing kept is {duration_text(age) or '0s'} old" if age is not None else ""
    return (
        f"the parameters of {record['objects_listed']} of {record['objects']} objects listed, the others "
        f"kept{oldest} (each listed again within {duration_text(record['refresh_seconds'])})"
    )


def selection_digest(select: SelectConfig) -> str:
    """What a catalog was listed for: the selection without `refresh` (a catalog listed for other objects,
    kinds or tags is not used)."""
    body = select.model_dump(mode="json", exclude={"refresh"})
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def due(object_ids: np.ndarray, listings: Listings, now: int, gap: int, refresh: int) -> np.ndarray:
    """Which objects (sorted ids) to list: those the listings do not know, those due before the next run
    (`gap` after this one, with half a gap to spare: runs do not start on the dot; due `refresh` after
    their listing at the latest, should it have been shortened), and those whose listing is in the
    clock's future (it went back, by more than `CLOCK_SLACK`)."""
    at = np.minimum(np.searchsorted(listings.object_id, object_ids), max(len(listings) - 1, 0))
    known = (listings.object_id[at] == object_ids) if len(listings) else np.zeros(len(object_ids), bool)
    ahead = max(gap, 0) * 3 // 2
    due_at = np.minimum(listings.due[at], listings.listed[at] + refresh)
    went_back = listings.listed[at] > now + CLOCK_SLACK
    listing: np.ndarray = ~known | (due_at <= now + ahead) | went_back
    return listing


def noted(
    object_ids: np.ndarray, listings: Listings | None, listed: np.ndarray, now: int, refresh: int
) -> Listings:
    """The listings after a run that listed `listed` (a mask of `object_ids`) at `now`: objects no longer
    in the object list are dropped. A run that listed every object spreads their next listings evenly."""
    count = len(object_ids)
    if listed.all():
        spread = refresh * (np.arange(count, dtype=np.int64) + 1) // max(count, 1)
        return Listings(object_ids.copy(), np.full(count, now, np.int64), now + spread)
    assert listings is not None, "objects kept from a catalog"
    at = np.minimum(np.searchsorted(listings.object_id, object_ids), max(len(listings) - 1, 0))
    return Listings(
        object_ids.copy(),
        np.where(listed, now, listings.listed[at]),
        np.where(listed, now + refresh, listings.due[at]),
    )


def catalog_options(config: Config, store: StateStore, now: int, full: bool, save: bool) -> CatalogOptions:
    """A run's use of the catalog of its login, in its state folder (`store`)."""
    source = config.source
    catalog = store.catalog(login_key(source.platform, source.username))
    return CatalogOptions(catalog, now, config.select.refresh, full, save)


def forget(options: CatalogOptions, select: SelectConfig, figures: CatalogFigures, ids: set[int]) -> None:
    """The parameters `ids` (their series answered 404) taken out of the catalog, and named."""
    figures.add_gone(sorted(ids))
    if options.save:
        options.store.forget(np.array(sorted(ids), np.int64), selection_digest(select))
    log.warning("%s", figures.gone_text())
