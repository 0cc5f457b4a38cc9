"""The run lock: one run at a time per checkpoint store.

Locally an flock, which the kernel drops when its holder dies. On object stores a lease, renewed while
the run lasts, that a dead run's successor may take once it has expired; on S3, taking and renewing it
are conditional writes (Storage.update), so two runs can never both believe they hold it. Stores
without them get a read-back after a settle delay, which narrows that race but cannot close it.

PostgreSQL tables add a session-level advisory lock (`AdvisoryLock`) held by the connection that makes
every commit of the run: runs on other machines, with checkpoint folders of their own, are kept apart
too, and when the connection dies the server drops the lock with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypedDict

from etl.errors import LockedError, StorageError
from etl.storage.atomic import KEEP, Storage
from etl.storage.postgres import Database, lock_key
from etl.timeutil import iso

LOCK_FILE = "lock"
LEASE_SETTLE = 1.0  # seconds between taking a lease and reading it back where writes are not conditional

log = logging.getLogger(__name__)


class Holder(TypedDict, total=False):
    """The lock file: who holds the lock. Any key may be missing from a file another version wrote."""

    pid: int
    host: str
    since: str  # ISO 8601
    command: str
    token: str  # a lease's (object stores)
    expires: float  # when a lease ends (Unix time)


class RunLock:
    """The lock file of one store folder."""

    def __init__(self, storage: Storage, lease_seconds: float = 120.0) -> None:
        self.storage = storage
        self.lease_seconds = lease_seconds
        self.lost: str | None = None  # set when a renewal finds another run holds our lease

    def check(self) -> None:
        """Before a commit: refuse if our lease went to another run (this one stalled past it)."""
        if self.lost:
            raise LockedError(self.lost)

    @contextmanager
    def held(self, command: str = "run") -> Iterator[None]:
        """The lock, its holder written in it: pid, host, since and the `command` that took it."""
        if self.storage.local:
            with self._flock(command):
                yield
        else:
            with self._lease(command):
                yield

    def _owner(self, command: str) -> Holder:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": iso(int(time.time() * 1000)),
            "command": command,
        }

    @contextmanager
    def _flock(self, command: str) -> Iterator[None]:
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
                raise LockedError(
                    f"another run holds the state lock {path} ({holder}); wait for it to finish"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(self._owner(command)).encode(), 0)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    @staticmethod
    def _held(data: bytes | None) -> Holder:
        try:
            held: Holder = json.loads(data) if data else {}
        except ValueError:
            held = {}
        return held if isinstance(held, dict) else {}

    @contextmanager
    def _lease(self, command: str) -> Iterator[None]:
        token = uuid.uuid4().hex
        where = self.storage.display(LOCK_FILE)
        owner = self._owner(command)

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
                raise LockedError(
                    f"lost the state lock {where} to another run (this one stalled past its lease)"
                )
            return take(current)

        self.storage.update(LOCK_FILE, take)
        if not self.storage.compare_and_swap:
            # Two runs may both have read "free" and written: the last write wins. Let a rival's write
            # land, then read back (best effort: such stores offer nothing stronger).
            time.sleep(LEASE_SETTLE)
            if self._held(self.storage.read(LOCK_FILE)).get("token") != token:
                raise LockedError(
                    f"another run took the state lock {where} at the same time; wait for it to finish"
                )
        self.lost = None
        stop = threading.Event()

        def keep_alive() -> None:
            while not stop.wait(self.lease_seconds / 4):
                try:
                    self.storage.update(LOCK_FILE, renew)
                except LockedError as exc:
                    self.lost = str(exc)
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
                self.storage.update(
                    LOCK_FILE, lambda cur: None if self._held(cur).get("token") == token else KEEP
                )
            except StorageError as exc:
                log.warning("could not release the state lock (it expires by itself): %s", exc)


class Lock(Protocol):
    """What a checkpoint store holds while a command writes (RunLock, AdvisoryLock)."""

    def held(self, command: str = "run") -> contextlib.AbstractContextManager[None]: ...

    def check(self) -> None: ...


class AdvisoryLock:
    """The file lock of the checkpoint folder, then PostgreSQL's advisory lock of (schema, app) on the
    database's shared connection (`Database.try_lock`)."""

    def __init__(self, files: RunLock, database: Database, app: str) -> None:
        self.files, self.database, self.app = files, database, app
        self.key = lock_key(f"{database.schema}/{app}")

    def check(self) -> None:
        self.files.check()
        self.database.check()

    def holder(self) -> str | None:
        """Who holds the advisory lock (pg_stat_activity's application name and since when), or None."""
        found = self.database.rows(
            "select a.application_name, a.backend_start from pg_locks l join pg_stat_activity a "
            "on a.pid = l.pid where l.locktype = 'advisory' and l.granted and l.objsubid = 1 "
            "and ((l.classid::bigint << 32) | l.objid::bigint) = $1",
            (self.key,),
        )
        if not found:
            return None
        name, since = found[0]
        return f"{name or 'another session'}, connected since {since:%Y-%m-%dT%H:%M:%SZ}"

    @contextlib.contextmanager
    def held(self, command: str = "run") -> Iterator[None]:
        with self.files.held(command):
            if not self.database.try_lock(self.key):
                raise LockedError(
                    f"another run holds the PostgreSQL advisory lock of {self.app} in {self.database.display} "
                    f"({self.holder() or 'gone since'}); wait for it to finish"
                )
            try:
                yield
            finally:
                self.database.unlock(self.key)
