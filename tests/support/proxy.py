"""A real forward proxy for the proxy tests: Debian's squid (installed by `make proxy`, part of `make test`)
on a free loopback port, with its own config in a temp folder. Its hosts file maps names that only it
resolves (a server the client cannot reach but through it), and its access log tells what went through."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.network import free_port


class Missing(Exception):
    """squid is not installed."""


@dataclass(frozen=True)
class RunningProxy:
    url: str
    access_log: Path

    def requests(self) -> list[str]:
        """The access log's lines so far: one per request it carried, one per CONNECT tunnel."""
        return self.access_log.read_text().splitlines() if self.access_log.exists() else []


def binary() -> str:
    found = shutil.which("squid") or ("/usr/sbin/squid" if os.path.exists("/usr/sbin/squid") else None)
    if found is None:
        raise Missing("squid not found")
    return found


@contextmanager
def running_proxy(hosts: dict[str, str]) -> Iterator[RunningProxy]:
    """squid on 127.0.0.1, resolving `hosts` (name -> address) itself, until the block ends. Under root it
    runs as Debian's `proxy` user, which then owns its folder."""
    squid = binary()
    home = Path(tempfile.mkdtemp(prefix="squid-etl-tests-"))
    port = free_port()
    (home / "hosts").write_text("".join(f"{address} {name}\n" for name, address in hosts.items()))
    config = home / "squid.conf"
    config.write_text(
        f"""
http_port 127.0.0.1:{port}
visible_hostname etl-tests
pid_filename {home}/squid.pid
cache_log {home}/cache.log
access_log stdio:{home}/access.log
coredump_dir {home}
hosts_file {home}/hosts
cache deny all
cache_mem 4 MB
memory_pools off
netdb_filename none
pinger_enable off
logfile_rotate 0
shutdown_lifetime 0 seconds
http_access allow all
"""
    )
    if os.geteuid() == 0:
        user = pwd.getpwnam("proxy")  # made by Debian's squid package
        for path in (home, *home.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
    process = subprocess.Popen(
        [squid, "-N", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                log = (home / "cache.log").read_text() if (home / "cache.log").exists() else ""
                raise RuntimeError(
                    f"squid did not start: {process.stderr.read() if process.stderr else ''}{log}"
                )
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("squid did not listen within 30 s")
            time.sleep(0.05)
        yield RunningProxy(f"http://127.0.0.1:{port}", home / "access.log")
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(home, ignore_errors=True)
