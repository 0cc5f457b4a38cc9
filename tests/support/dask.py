"""Dask workers that share no disk with the tests or with each other: each `dask worker` (with its nanny)
in a mount namespace of its own (`unshare --mount`, as root) over a /tmp of its own (the checkout and
its venv bound back when they are under /tmp), from a home and a working folder of their own, in a process
group of its own (to kill it whole)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

DASK = str(Path(sys.executable).with_name("dask"))
TMP = Path("/tmp")


def _private() -> str:
    """The shell that makes a worker's /tmp its own. The checkout and the venv stay: a clone under /tmp (a
    CI's, say) is bound back over the new /tmp through a descriptor opened before it (`mount` would
    otherwise resolve the path into the new, empty /tmp)."""
    roots = sorted({Path(__file__).resolve().parents[2], Path(sys.prefix).resolve()})
    kept = [
        r for r in roots if r.is_relative_to(TMP) and not any(r != o and r.is_relative_to(o) for o in roots)
    ]
    opened = "".join(f"exec {3 + i}<{shlex.quote(str(r))} && " for i, r in enumerate(kept))
    bound = "".join(
        f"mkdir -p {shlex.quote(str(r))} && mount --no-canonicalize --bind /proc/self/fd/{3 + i} "
        f"{shlex.quote(str(r))} && "
        for i, r in enumerate(kept)
    )
    return f'{opened}mount -t tmpfs tmpfs /tmp && {bound}mkdir /tmp/home /tmp/work && cd /tmp/work && exec "$0" "$@"'


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
                    ["unshare", "--mount", "--propagation", "private", "sh", "-c", _private(), *command],
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
