"""A TCP connection to a host whose name may stand for several addresses: they are tried as RFC 8305
("Happy Eyeballs") has it, on whichever event loop runs (asyncio's `happy_eyeballs_delay` is not
uvloop's).

The addresses come as the resolver orders them, the families alternating from the first one's; each
attempt starts `ATTEMPT_DELAY` after the one before it, or at once when that one fails, and the first
connection made wins (the others are closed). An address that drops packets thus costs a quarter of a
second, not the connect timeout; a host with one address is one plain connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import socket
from collections.abc import Sequence
from typing import Any

ATTEMPT_DELAY = 0.25  # seconds before the next address is tried: RFC 8305's recommended value

AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]


async def open_socket(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to `host`:`port`; an OSError when no address of it answers
    (each address's failure named when they differ), a socket.gaierror when the name does not resolve.
    Bounded by the caller (the connect timeout)."""
    addresses = _literal(host, port) or _interleaved(
        await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    )
    if not addresses:
        raise OSError(f"{host} has no address")
    if len(addresses) == 1:
        return await _attempt(loop, addresses[0])
    return await _race(loop, addresses)


def _literal(host: str, port: int) -> list[AddrInfo] | None:
    """An IP address as a resolver would give it, without asking one (asyncio asks in a thread)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name, or an IPv6 address with a zone: the resolver's
    if ip.version == 4:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]
    return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port, 0, 0))]


def _interleaved(infos: Sequence[AddrInfo]) -> list[AddrInfo]:
    """The resolver's addresses, once each, alternating families from the first one's (RFC 8305 §4)."""
    unique = list({info[4]: info for info in infos}.values())
    if not unique:
        return []
    first = [info for info in unique if info[0] == unique[0][0]]
    other = [info for info in unique if info[0] != unique[0][0]]
    return [info for pair in itertools.zip_longest(first, other) for info in pair if info is not None]


async def _attempt(loop: asyncio.AbstractEventLoop, info: AddrInfo) -> socket.socket:
    family, kind, proto, _, address = info
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # requests go out whole, at once
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


async def _race(loop: asyncio.AbstractEventLoop, addresses: list[AddrInfo]) -> socket.socket:
    waiting = list(addresses)
    pending: set[asyncio.Task[socket.socket]] = set()
    attempts: dict[asyncio.Task[socket.socket], AddrInfo] = {}
    errors: list[tuple[AddrInfo, BaseException]] = []
    won: socket.socket | None = None
    try:
        while waiting or pending:
            if waiting:
                info = waiting.pop(0)
                task = loop.create_task(_attempt(loop, info))
                task.add_done_callback(_retrieved)
                pending.add(task)
                attempts[task] = info
            done, _ = await asyncio.wait(
                pending, timeout=ATTEMPT_DELAY if waiting else None, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:  # more than one may have connected in the same step: the first wins
                pending.discard(task)
                error = task.exception()
                if error is None and won is None:
                    won = task.result()
                elif error is None:
                    task.result().close()
                else:
                    errors.append((attempts[task], error))
            if won is not None:
                return won
    finally:
        for task in pending:
            task.cancel()  # each attempt closes its own socket
    raise _failed(errors)


def _retrieved(task: asyncio.Task[socket.socket]) -> None:
    if not task.cancelled():
        task.exception()  # an attempt that lost the race failing after it: nobody else asks


def _failed(errors: list[tuple[AddrInfo, BaseException]]) -> OSError:
    """One error for every address having failed: the first's, when they all say the same."""
    if len({str(error) for _, error in errors}) == 1 and isinstance(errors[0][1], OSError):
        return errors[0][1]
    return OSError("; ".join(f"{info[4][0]}: {error}" for info, error in errors))
