"""Names of files being written: hidden (readers skip dot files), and recording their writer, so a run
can tell a live writer's temp file (another shard writing the same folder right now) from a killed
writer's leftover."""

from __future__ import annotations

import os
import re
import socket
import time
import uuid

TMP_SUFFIX = ".tmp"
TMP_MAX_AGE = 3600.0  # seconds: a temp file of another host this old has no live writer
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


def beside(path: str) -> str:
    """A temp name in the folder of `path`, so that replacing `path` with it is a rename."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}@{_HOST}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")


def spool() -> str:
    """A local temp file for a copy of a remote file (removed by whoever consumes it; by the next run
    if this process is killed first)."""
    from etl.storage.spools import spool_file

    return spool_file("copy-", TMP_SUFFIX)


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def abandoned(path: str) -> bool:
    """Is the temp file at `path` a leftover: its writer dead (this host), or it is old (another host)?"""
    parts = os.path.basename(path).split(".")
    owner = parts[-3] if len(parts) >= 4 else ""
    pid, _, host = owner.partition("@")
    if host == _HOST and pid.isdigit():
        return not _alive(int(pid))
    if host:
        try:
            return time.time() - os.path.getmtime(path) > TMP_MAX_AGE
        except FileNotFoundError:
            return False  # renamed meanwhile
    return True  # a name without its writer: from an older version


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
