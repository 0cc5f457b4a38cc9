"""A small HTTP/1.1 load generator: keep-alive connections asking for one URL for a while.

    python benchmarks/loadgen.py --base-url URL --path /db/measure/ID/START/END [--seconds 5] [--connections 16]

Bare asyncio streams (uvloop when installed) rather than an HTTP client library, so the client costs
little next to the server it measures. Signs in first (demo/demo). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

import httpx


async def _connection(host: str, port: int, request: bytes, deadline: float, totals: dict) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            totals["requests"] += 1
            totals["bytes"] += len(body)
            if head[9:12] != b"200":
                totals["errors"] += 1
    finally:
        writer.close()


async def load(base_url: str, path: str, seconds: float, connections: int, cookie: str) -> dict:
    parts = urlsplit(base_url)
    target = parts.path.rstrip("/") + path
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: application/json\r\n"
        f"Cookie: {cookie}\r\n\r\n"
    ).encode()
    totals = {"requests": 0, "bytes": 0, "errors": 0}
    started = time.perf_counter()
    await asyncio.gather(
        *(
            _connection(parts.hostname, parts.port, request, started + seconds, totals)
            for _ in range(connections)
        )
    )
    elapsed = time.perf_counter() - started
    return {
        **totals,
        "seconds": elapsed,
        "requests_per_second": totals["requests"] / elapsed,
        "connections": connections,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--path", required=True, help="below the base URL, e.g. /db/measure/1001/START/END")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    login = httpx.post(args.base_url + "/auth/login", params={"username": "demo", "password": "demo"})
    login.raise_for_status()
    cookie = "; ".join(f"{k}={login.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))
    sample = httpx.get(args.base_url + args.path, headers={"Cookie": cookie})
    sample.raise_for_status()
    points = len(sample.json()["points"])
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    result = runner(load(args.base_url, args.path, args.seconds, args.connections, cookie))
    json.dump({**result, "points_per_answer": points, "bytes_per_answer": len(sample.content)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
