"""Networks as users meet them, on loopback: an address that drops packets (a listening socket whose
queue is full never answers a SYN), and event loops whose resolver gives a name the addresses a test
chooses (asyncio's and uvloop's)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvloop


@contextmanager
def blackhole(host: str, port: int) -> Iterator[None]:
    """`host`:`port` drops every connection attempt from now on, as a host behind a broken route: a
    listening socket of backlog 0 whose one queued connection is never accepted."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as listener, socket.socket(family) as queued:
        listener.bind((host, port))
        listener.listen(0)
        queued.connect((host, port))  # fills the queue: the kernel drops later SYNs
        yield


def free_port() -> int:
    """A loopback port nothing listens on (a host that refuses connections, or a server's port to be)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_port_on_both(v4: str = "127.0.0.1", v6: str = "::1") -> int:
    """A port free on both loopback addresses (a server on one, a blackhole on the other)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((v4, 0))
            port = probe.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET6) as other:
                    other.bind((v6, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free on both loopback addresses")


def _stubbed(base: type[asyncio.AbstractEventLoop], names: dict[str, list[str]]) -> asyncio.AbstractEventLoop:
    class Stubbed(base):  # type: ignore[valid-type, misc]
        async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
            if host not in names:
                return await super().getaddrinfo(host, port, *args, **kwargs)
            return [
                (
                    socket.AF_INET6 if ":" in address else socket.AF_INET,
                    socket.SOCK_STREAM,
                    socket.IPPROTO_TCP,
                    "",
                    (address, port, 0, 0) if ":" in address else (address, port),
                )
                for address in names[host]
            ]

    return Stubbed()


LOOPS = {"asyncio": asyncio.SelectorEventLoop, "uvloop": uvloop.Loop}


def loop_resolving(kind: str, names: dict[str, list[str]]) -> asyncio.AbstractEventLoop:
    """A new event loop of `kind` (asyncio, uvloop) whose resolver answers `names` (name -> addresses, in
    the order given) and asks the system for any other name."""
    return _stubbed(LOOPS[kind], names)
