"""Checkpoints: per (parameter, series), the time intervals already written, and the run lock.

State is the list of completed half-open intervals, merged when adjacent (as Airbyte's concurrent
cursor), so windows finishing out of order resume correctly and failed windows stay open. It is
committed atomically, only after the files holding those intervals are durable.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from etl.errors import LockedError, StorageError
from etl.storage import KEEP, Storage
from etl.timeutil import iso

if TYPE_CHECKING:
    from etl.config import Config

Interval = tuple[int, int]
STATE_FILE = "state.json"
LOCK_FILE = "lock"
LEASE_SETTLE = 1.0  # seconds between taking a lease and reading it back where writes are not conditional

log = logging.getLogger(__name__)


def merge(intervals: list[Interval]) -> list[Interval]:
    out: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[0] < i[1]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def subtract(window: Interval, covered: list[Interval]) -> list[Interval]:
    """Parts of window not in covered (covered merged and sorted)."""
    start, end = window
    gaps = []
    for c_start, c_end in covered:
        if c_end <= start or c_start >= end:
            continue
        if c_start > start:
            gaps.append((start, c_start))
        start = max(start, c_end)
    if start < end:
        gaps.append((start, end))
    return gaps


@dataclass
class State:
    covered: dict[str, list[Interval]] = field(default_factory=dict)  # "param_id/series" -> intervals

    @staticmethod
    def key(param_id: int, series: str) -> str:
        return f"{param_id}/{series}"

    def intervals(self, param_id: int, series: str) -> list[Interval]:
        return self.covered.get(self.key(param_id, series), [])

    def high_water(self, param_id: int, series: str) -> int | None:
        intervals = self.intervals(param_id, series)
        return intervals[-1][1] if intervals else None

    def add(self, param_id: int, series: str, start: int, end: int) -> None:
        key = self.key(param_id, series)
        self.covered[key] = merge([*self.covered.get(key, []), (start, end)])

    def reset(self, param_ids: set[int] | None = None, series: set[str] | None = None) -> int:
        doomed = [
            k for k in self.covered
            if (param_ids is None or int(k.split("/")[0]) in param_ids)
            and (series is None or k.split("/")[1] in series)
        ]
        for k in doomed:
            del self.covered[k]
        return len(doomed)

    def to_json(self) -> bytes:
        body = {"version": 1, "covered": {k: [list(i) for i in v] for k, v in sorted(self.covered.items())}}
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> State:
        try:
            body = json.loads(data)
            return cls({k: [(int(s), int(e)) for s, e in v] for k, v in body["covered"].items()})
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"state file {where} is damaged ({exc}); move it away or run 'etl state reset'") from None

    def rows(self) -> Iterator[dict]:
        for key, intervals in sorted(self.covered.items(), key=lambda kv: (int(kv[0].split("/")[0]), kv[0])):
            param_id, series = key.split("/")
            yield {
                "param_id": int(param_id),
                "series": series,
                "high_water": iso(intervals[-1][1]),
                "intervals": len(intervals),
                "covered": ", ".join(f"{iso(s)}..{iso(e)}" for s, e in intervals),
            }


Shard = tuple[int, int]  # (index, count)
_SHARD_FOLDER = re.compile(r"shard-(\d+)of(\d+)")


def shard_folder(shard: Shard | None) -> str:
    """Where a shard keeps its checkpoints and lock, under the state path ("" when unsharded)."""
    return f"shard-{shard[0]}of{shard[1]}" if shard else ""


class StateStore:
    """state.json and the run lock of one (config, shard). Shards never share either, so N sharded
    jobs run side by side without waiting for each other."""

    def __init__(self, storage: Storage, lease_seconds: float = 120.0) -> None:
        self.storage = storage
        self.lease_seconds = lease_seconds
        self._lost: str | None = None  # set when a renewal finds another run holds our lease

    @classmethod
    def open(cls, url: str, options: dict | None = None, shard: tuple[int, int] | None = None,
             lease_seconds: float = 120.0) -> StateStore:
        folder = shard_folder(shard)
        return cls(Storage(f"{url.rstrip('/')}/{folder}" if folder else url, options), lease_seconds)

    @classmethod
    def for_config(cls, config: Config, shard: Shard | None = None) -> StateStore:
        return cls.open(config.state_path, config.sink.storage_options, shard, config.state.lease / 1000)

    @classmethod
    def all_for_config(cls, config: Config) -> list[StateStore]:
        """The unsharded store and every shard's that exists."""
        names = Storage(config.state_path, config.sink.storage_options).listdir("")
        shards = [(int(m.group(1)), int(m.group(2))) for name in names if (m := _SHARD_FOLDER.fullmatch(name))]
        return [cls.for_config(config, shard) for shard in [None, *shards]]

    def load(self) -> State:
        data = self.storage.read(STATE_FILE)
        return State() if data is None else State.from_json(data, self.storage.display(STATE_FILE))

    def save(self, state: State) -> None:
        if self._lost:
            raise LockedError(self._lost)
        self.storage.write_atomic(STATE_FILE, state.to_json())

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One run at a time per state. Locally an flock, which the kernel drops when its holder dies;
        on object stores a lease, renewed while the run lasts, that a dead run's successor may take
        once it has expired. On S3, taking and renewing it are conditional writes (Storage.update), so
        two runs can never both believe they hold it; stores without them get a read-back after a
        settle delay, which narrows that race but cannot close it."""
        if self.storage.local:
            with self._flock():
                yield
        else:
            with self._lease():
                yield

    def _owner(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "since": iso(int(time.time() * 1000))}

    @contextmanager
    def _flock(self) -> Iterator[None]:
        path = self.storage.full(LOCK_FILE)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create the state lock {path}: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "unknown"
                raise LockedError(f"another run holds the state lock {path} ({holder}); wait for it to finish") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(self._owner()).encode(), 0)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    @staticmethod
    def _held(data: bytes | None) -> dict:
        try:
            held = json.loads(data) if data else {}
        except ValueError:
            held = {}
        return held if isinstance(held, dict) else {}

    @contextmanager
    def _lease(self) -> Iterator[None]:
        token = uuid.uuid4().hex
        where = self.storage.display(LOCK_FILE)
        owner = self._owner()

        def take(current: bytes | None) -> bytes:
            held = self._held(current)
            if held.get("token") not in (None, token) and held.get("expires", 0) > time.time():
                raise LockedError(
                    f"another run holds the state lock {where} (pid {held.get('pid')} on {held.get('host')}, "
                    f"since {held.get('since')}); wait for it to finish"
                )
            return json.dumps({**owner, "token": token, "expires": time.time() + self.lease_seconds}).encode()

        def renew(current: bytes | None) -> bytes:
            if self._held(current).get("token") != token:
                raise LockedError(f"lost the state lock {where} to another run (this one stalled past its lease)")
            return take(current)

        self.storage.update(LOCK_FILE, take)
        if not self.storage.compare_and_swap:
            # Two runs may both have read "free" and written: the last write wins. Let a rival's write
            # land, then read back (best effort: such stores offer nothing stronger).
            time.sleep(LEASE_SETTLE)
            if self._held(self.storage.read(LOCK_FILE)).get("token") != token:
                raise LockedError(f"another run took the state lock {where} at the same time; wait for it to finish")
        self._lost = None
        stop = threading.Event()

        def keep_alive() -> None:
            while not stop.wait(self.lease_seconds / 4):
                try:
                    self.storage.update(LOCK_FILE, renew)
                except LockedError as exc:
                    self._lost = str(exc)
                    return
                except StorageError as exc:  # a blip: the next renewal may succeed before expiry
                    log.warning("could not renew the state lock: %s", exc)

        renewer = threading.Thread(target=keep_alive, name="state-lease", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
            try:
                self.storage.update(LOCK_FILE, lambda cur: None if self._held(cur).get("token") == token else KEEP)
            except StorageError as exc:
                log.warning("could not release the state lock (it expires by itself): %s", exc)
