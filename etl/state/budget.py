"""What the shards of one source running at once tell each other of the limit they share
(etl/client/budget.py's `Part`), through the state storage they already share: one file per source,
`{state.path}/budget.json`, an entry per live shard (its label: `s0of4`):

    {"s0of4": {"limit": 12, "share": 3, "wants": 40, "in_flight": 2.7, "expires": 1767225600.0, ...}}

`limit` is the whole the shard learned, `share` its part of it, `wants` its requests waiting or on the
wire, `in_flight` its mean in flight since its last renewal, `baseline` the time an answer takes without a
queue (seconds, their standard deviation, answers; the shards of one host take the fastest), `expires`
the end of its lease (Unix time). Each shard renews its entry every `RENEW` seconds (a quarter of
`state.lease` when that is shorter; `EARLY` while it gathers) with `Storage.update`, the compare-and-swap
of the run lock, and learns from the others' entries its rank among the live shards, what each wants (a
shard near its end leaves the others its permits), what they have in flight and the limits they learned.
A shard that ends removes its entry; a crashed one's expires after `state.lease`, and the next renewal of
another shard drops it. For its first `GATHER` seconds a shard counts the shards of its `I/N` that have
not said so yet as live, wanting what it wants: shards started together start within seconds of each
other, and the first to start would otherwise take the whole limit before the others are seen.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from typing import TypedDict, cast

from etl.client.budget import Part
from etl.storage.atomic import KEEP, Keep, Storage

BUDGET_FILE = "budget.json"
RENEW = 1.0  # seconds between two renewals at most
GATHER = 10.0  # seconds a shard counts its siblings not seen yet (processes started together on a busy host)
EARLY = 0.25  # seconds between two renewals while gathering: limits grow fastest at the start


class Entry(TypedDict, total=False):
    """A shard's entry. Any key may be missing from a file another version wrote."""

    limit: int
    share: int
    wants: int
    in_flight: float
    baseline: list[float]
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


def _number(entry: Entry, key: str, default: float, least: float = 0) -> int | float:
    """A number of another shard's entry: `default` when it is missing or not a number (another version
    wrote it)."""
    value = entry.get(key, default)
    return max(least, value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _baseline(entry: Entry) -> tuple[float, float, int] | None:
    """Another shard's baseline: seconds, their standard deviation, answers (None: none, or unreadable)."""
    value = entry.get("baseline")
    if not isinstance(value, list) or len(value) != 3:
        return None
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        return None
    seconds, spread, count = value
    return (float(seconds), float(spread), int(count)) if seconds > 0 and count > 0 else None


class ShardBudget:
    """One shard's entry in its source's budget file: `demand` tells what it wants now, `siblings` how
    many shards its `I/N` has (N)."""

    def __init__(
        self,
        storage: Storage,
        label: str,
        part: Part,
        lease_seconds: float,
        demand: Callable[[], int] = lambda: 1,
        siblings: int = 1,
    ) -> None:
        self.storage, self.label, self.part = storage, label, part
        self.lease = lease_seconds
        self.every = min(RENEW, lease_seconds / 4)
        self.demand, self.siblings = demand, siblings
        self._gathering_until = time.monotonic() + GATHER

    def wait(self) -> float:
        """Seconds to the next renewal: shorter while the shards gather, when their limits change fastest."""
        return min(self.every, EARLY) if time.monotonic() < self._gathering_until else self.every

    def renew(self) -> None:
        """Write this shard's entry, drop the expired ones, and take this shard's place among the others."""
        wants = max(1, self.demand())  # a shard wants a request at least until it ends, as a task does
        mine: Entry = {
            "limit": self.part.inner.current,
            "share": self.part.current,
            "wants": wants,
            "in_flight": round(self.part.in_flight(), 2),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        if (baseline := self.part.baseline) is not None:
            mine["baseline"] = list(baseline)
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
        others = {name: entry for name, entry in live.items() if name != self.label}
        everyone = [
            int(_number(live[name], "wants", _number(live[name], "share", 1), least=1)) for name in names
        ]
        if time.monotonic() < self._gathering_until:
            everyone += [wants] * max(0, self.siblings - len(names))
        baselines = [
            baseline
            for entry in others.values()
            if entry.get("host") == mine["host"] and (baseline := _baseline(entry)) is not None
        ]
        self.part.among(
            names.index(self.label),
            everyone,
            sum(_number(entry, "in_flight", 0.0) for entry in others.values()),
            [int(limit) for entry in others.values() if (limit := _number(entry, "limit", 0)) >= 1],
            min(baselines, default=None),
        )

    def leave(self) -> None:
        """This shard's entry removed (the file with the last one)."""

        def change(current: bytes | None) -> bytes | None | Keep:
            entries = _entries(current)
            if self.label not in entries:
                return KEEP
            del entries[self.label]
            return json.dumps(entries, sort_keys=True).encode() if entries else None

        self.storage.update(BUDGET_FILE, change)
