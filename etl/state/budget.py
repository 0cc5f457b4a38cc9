"""What the shards of one source running at once tell each other of the limit they share
(etl/client/budget.py's `Part`), through the state storage they already share: one file per source,
`{state.path}/budget.json`, an entry per live shard (its label: `s0of4`):

    {"s0of4": {"limit": 12, "share": 3, "in_flight": 2.7, "expires": 1767225600.0, "host": ..., "pid": ...}}

`limit` is the whole the shard learned, `share` its part of it, `in_flight` its mean in flight since its
last renewal, `expires` the end of its lease (Unix time). Each shard renews its entry every `RENEW` seconds
(a quarter of `state.lease` when that is shorter) with `Storage.update`, the compare-and-swap of the run
lock, and learns from the others' entries its rank among the live shards and what they have in flight.
A shard that ends removes its entry; a crashed one's expires after `state.lease`, and the next renewal of
another shard drops it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TypedDict, cast

from etl.client.budget import Part
from etl.storage.atomic import KEEP, Keep, Storage

BUDGET_FILE = "budget.json"
RENEW = 2.0  # seconds between two renewals at most


class Entry(TypedDict, total=False):
    """A shard's entry. Any key may be missing from a file another version wrote."""

    limit: int
    share: int
    in_flight: float
    expires: float
    host: str
    pid: int


def _entries(data: bytes | None) -> dict[str, Entry]:
    try:
        entries = json.loads(data) if data else {}
    except ValueError:
        return {}
    if not isinstance(entries, dict):
        return {}
    return {k: cast(Entry, v) for k, v in entries.items() if isinstance(v, dict)}


class ShardBudget:
    """One shard's entry in its source's budget file."""

    def __init__(self, storage: Storage, label: str, part: Part, lease_seconds: float) -> None:
        self.storage, self.label, self.part = storage, label, part
        self.lease = lease_seconds
        self.every = min(RENEW, lease_seconds / 4)

    def renew(self) -> None:
        """Write this shard's entry, drop the expired ones, and take this shard's place among the others."""
        mine: Entry = {
            "limit": self.part.inner.current,
            "share": self.part.current,
            "in_flight": round(self.part.in_flight(), 2),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        live: dict[str, Entry] = {}

        def change(current: bytes | None) -> bytes:
            now = time.time()
            live.clear()
            live.update(
                (k, v) for k, v in _entries(current).items() if k != self.label and v.get("expires", 0) > now
            )
            live[self.label] = {**mine, "expires": now + self.lease}
            return json.dumps(live, sort_keys=True).encode()

        self.storage.update(BUDGET_FILE, change)
        names = sorted(live)
        others = sum(float(entry.get("in_flight", 0)) for name, entry in live.items() if name != self.label)
        self.part.among(names.index(self.label), len(names), others)

    def leave(self) -> None:
        """This shard's entry removed (the file with the last one)."""

        def change(current: bytes | None) -> bytes | None | Keep:
            entries = _entries(current)
            if self.label not in entries:
                return KEEP
            del entries[self.label]
            return json.dumps(entries, sort_keys=True).encode() if entries else None

        self.storage.update(BUDGET_FILE, change)
