"""Dask workers that share no disk with the tests or with each other: each `dask worker` (with its nanny)
in a mount namespace of its own (`unshare --mount`, as root) over a /tmp of its own, from a home and a
working folder of their own, in a process group of its own (to kill it whole)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

DASK = str(Path(sys.executable).with_name("dask"))
PRIVATE = 'mount -t tmpfs tmpfs /tmp && mkdir /tmp/home /tmp/work && cd /tmp/work && exec "$0" "$@"'


def namespaces() -> str | None:
    """Why workers cannot have mount namespaces of their own here, or None."""
    if os.geteuid() != 0:
        return "unshare --mount needs root"
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True
        )
    except FileNotFoundError:
        return "unshare (util-linux) is not installed"
    if probe.returncode:
        return f"unshare --mount fails here: {probe.stderr.decode().strip()}"
    return None


class PrivateWorkers:
    """Workers of the scheduler at `address`, named w0, w1... in the order they were started; `hidden`:
    environment variables they do not get."""

    def __init__(self, address: str, log: Path, hidden: tuple[str, ...] = ()) -> None:
        self.address, self.log, self.hidden = address, log, hidden
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, threads: int = 2) -> str:
        """One more worker; its name."""
        env = {k: v for k, v in os.environ.items() if k not in self.hidden}
        env.update(HOME="/tmp/home", TMPDIR="/tmp")
        name = f"w{len(self.procs)}"
        command = [DASK, "worker", self.address, "--name", name, "--nthreads", str(threads), "--no-dashboard"]
        command += [
            "--preload",
            "etl.pipeline.slab",
        ]  # etl imported while the worker starts, not by its first task
        with open(self.log, "ab") as log:
            self.procs.append(
                subprocess.Popen(
                    ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE, *command],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return name

    def kill(self, index: int) -> None:
        """The worker's whole process group: the nanny, the worker, and whatever they started."""
        proc = self.procs[index]
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for index in range(len(self.procs)):
            self.kill(index)
