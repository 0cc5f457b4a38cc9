"""Local spool files (rows on their way to a table, copies of remote files), in a folder per process
that a later process can tell is dead: `{tmp}/etl-spools/{pid}-{random}/` holds a `lock` file the
owner keeps flock'ed while it lives. The kernel drops the lock when the process dies however it dies
(SIGKILL included), so any etl process sweeps folders whose lock it can take: a killed run's spools
are removed by the next one. A run removes its own folder when it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: folders are told apart by age alone
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

ROOT_NAME = "etl-spools"
LOCK = "lock"
LEGACY = ("etl-lake-", "etl-rows-", "etl-spool-")  # spools of versions that put them in the temp folder
LEGACY_AGE = 3600.0  # seconds: such a spool this old has no live writer
UNLOCKED_AGE = 60.0  # seconds: a folder still without its lock this long was never finished


def root() -> str:
    return os.path.join(tempfile.gettempdir(), ROOT_NAME)


class _Folder:
    """This process's spool folder, made on first use and held (flock) until released."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._path: str | None = None
        self._lock_fd: int | None = None
        self._pid = 0
        self._users = 0

    def path(self) -> str:
        with self._guard:
            if self._path is None or self._pid != os.getpid():  # a forked child makes its own
                self._path, self._lock_fd, self._pid = None, None, os.getpid()
                sweep()
                self._path = self._make()
            return self._path

    def _make(self) -> str:
        base = root()
        os.makedirs(base, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # Made under a hidden name and renamed once locked: a sweeper never sees it unlocked.
        staging = os.path.join(base, f".{name}")
        os.makedirs(staging)
        fd = os.open(os.path.join(staging, LOCK), os.O_CREAT | os.O_RDWR, 0o600)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        final = os.path.join(base, name)
        os.rename(staging, final)
        self._lock_fd = fd
        atexit.register(shutil.rmtree, final, True)  # spools made outside a run (a kill is swept later)
        return final

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While a run goes on; the folder is removed when the last one ends."""
        with self._guard:
            self._users += 1
        try:
            yield
        finally:
            with self._guard:
                self._users -= 1
                if not self._users and self._path is not None and self._pid == os.getpid():
                    shutil.rmtree(self._path, ignore_errors=True)
                    if self._lock_fd is not None:
                        with contextlib.suppress(OSError):
                            os.close(self._lock_fd)
                    self._path = self._lock_fd = None


_FOLDER = _Folder()


def held() -> contextlib.AbstractContextManager[None]:
    """Keep this process's spools for the life of a run, and remove them when it ends."""
    return _FOLDER.held()


def spool_file(prefix: str, suffix: str) -> str:
    """A new empty file in this process's spool folder (the caller removes it when done)."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=_FOLDER.path())
    os.close(fd)
    return path


def spool_folder(prefix: str) -> str:
    """A new folder in this process's spool folder (the caller removes it when done)."""
    return tempfile.mkdtemp(prefix=prefix, dir=_FOLDER.path())


def _dead(folder: str) -> bool:
    """Is nobody holding the folder's lock (its process ended)? Takes the lock if so."""
    lock = os.path.join(folder, LOCK)
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        try:
            return time.time() - os.path.getmtime(folder) > UNLOCKED_AGE
        except FileNotFoundError:
            return False
    try:
        if fcntl is None:  # pragma: no cover
            return time.time() - os.path.getmtime(lock) > LEGACY_AGE
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its process lives
        return True
    finally:
        os.close(fd)


def dead(temp: str | None = None) -> list[str]:
    """The spool folders of processes that ended without removing them (nothing is removed)."""
    base = os.path.join(temp or tempfile.gettempdir(), ROOT_NAME)
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return []
    folders = [os.path.join(base, n) for n in names if not n.startswith(".")]
    return [f for f in folders if f != _FOLDER._path and os.path.isdir(f) and _dead(f)]


def sweep() -> int:
    """Remove the spools of dead processes (and old ones of earlier versions); how many."""
    removed = 0
    base = root()
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(base):
            folder = os.path.join(base, name)
            if name.startswith(".") or folder == _FOLDER._path or not os.path.isdir(folder):
                continue
            if _dead(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    temp = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for entry in os.scandir(temp):
            if not entry.name.startswith(LEGACY):
                continue
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime < LEGACY_AGE:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed += 1
    if removed:
        log.debug("removed %d spool(s) of runs that ended without cleaning up", removed)
    return removed
