"""How many CPUs this process may use: its affinity, within a container's CPU quota (cgroup v2's
`cpu.max`, v1's `cpu.cfs_quota_us`), which `os.cpu_count()` and the affinity both ignore: a container
limited to 2 CPUs on a 64-core host sees 64."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _quota()
    return max(1, min(cores, quota)) if quota is not None else max(1, cores)


def _quota() -> int | None:
    try:
        limit, period = (CGROUP / "cpu.max").read_text().split()[:2]
        if limit == "max":
            return None
        return math.ceil(int(limit) / int(period))
    except (OSError, ValueError):
        pass
    try:
        limit = (CGROUP / "cpu" / "cpu.cfs_quota_us").read_text().strip()
        period = (CGROUP / "cpu" / "cpu.cfs_period_us").read_text().strip()
        return None if int(limit) <= 0 else math.ceil(int(limit) / int(period))
    except (OSError, ValueError):
        return None
