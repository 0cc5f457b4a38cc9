"""CPU per request of the client on the success path, next to bare httpx.

    python benchmarks/client_cpu.py [--requests 4000] [--repeat 7] [--uvloop]

Each contender makes the same requests, 16 in flight, after signing in: a small JSON answer
(`GET /db/object/shortest`) and a raw 24 h series (decoded into columns by the client; bare httpx only
reads the body). Two settings: against an emulator process on loopback (its CPU is not counted), and
in process with httpx's MockTransport replaying the emulator's answers, which leaves only the client's
own work to measure (no sockets, no noise from the server). The figure is the contender's process CPU
time (every thread) per request; the best of `--repeat` runs counts, contenders alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

import httpx

from etl_emulator.server import EmulatorControl

NOW = "2026-11-20T00:00:00Z"
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
DAY = 86_400_000
IN_FLIGHT = 16
SMALL = "/db/object/shortest"


def series_path(i: int) -> str:
    return f"/db/measure/1001/{T0 + i % 7 * DAY}/{T0 + i % 7 * DAY + DAY}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def many(n: int, one) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def go(i: int) -> None:
        async with gate:
            await one(i)

    await asyncio.gather(*(go(i) for i in range(n)))


async def timed(n: int, one) -> float:
    await many(64, one)  # warm: connections open, answers cached by the emulator
    cpu = time.process_time()
    await many(n, one)
    return (time.process_time() - cpu) / n


async def etl_client(base: str, n: int, series: bool, transport: httpx.AsyncBaseTransport | None) -> float:
    from etl.client import MonitoringClient

    async with MonitoringClient(base, "demo", "demo", max_in_flight=IN_FLIGHT, transport=transport) as c:
        await c.sign_in()
        if series:
            return await timed(n, lambda i: c.measure_raw(1001, T0 + i % 7 * DAY, T0 + i % 7 * DAY + DAY))
        return await timed(n, lambda i: c.objects_short())


async def bare_httpx(base: str, n: int, series: bool, transport: httpx.AsyncBaseTransport | None) -> float:
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(
        limits=limits, headers={"Accept": "application/json"}, transport=transport
    ) as c:
        login = await c.post(base + "/auth/login", params={"username": "demo", "password": "demo"})
        cookie = "; ".join(f"{k}={login.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))
        c.cookies.clear()
        headers = {"Cookie": cookie}

        async def one(i: int) -> None:
            response = await c.get(base + (series_path(i) if series else SMALL), headers=headers)
            response.raise_for_status()

        return await timed(n, one)


def replaying(base: str) -> httpx.MockTransport:
    """The emulator's answers to every request the contenders make, served from memory."""
    with httpx.Client(base_url=base) as c:
        login = c.post("/auth/login", params={"username": "demo", "password": "demo"})
        cookies = {"Cookie": "; ".join(f"{k}={login.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))}
        answers = {
            path: c.get(path, headers=cookies).content for path in [SMALL, *map(series_path, range(7))]
        }
    sign_in = [(k, v) for k, v in login.headers.multi_items() if k.lower() in ("set-cookie", "content-type")]
    prefix = httpx.URL(base).path

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix(prefix)
        if path == "/auth/login":
            return httpx.Response(200, headers=sign_in, content=login.content)
        return httpx.Response(200, headers={"content-type": "application/json"}, content=answers[path])

    return httpx.MockTransport(handle)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop, as `etl run` does")
    args = parser.parse_args()
    run = asyncio.run
    if args.uvloop:
        import uvloop

        run = uvloop.run
    port = free_port()
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "etl",
            "emulator",
            "serve",
            "--port",
            str(port),
            "--now",
            NOW,
            "--objects",
            "2",
            "--period-range",
            "60:60",
            "--log-level",
            "warning",
        ]
    )
    try:
        control = EmulatorControl(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while True:
            try:
                control.health()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        base = f"http://127.0.0.1:{port}/sem-restservices"
        mock = replaying(base)
        for setting, transport in (("loopback", None), ("in process", mock)):
            for series in (False, True):
                n = args.requests // 4 if series else args.requests
                best = {"bare httpx": float("inf"), "etl client": float("inf")}
                for _ in range(args.repeat):
                    for name, contender in (("bare httpx", bare_httpx), ("etl client", etl_client)):
                        best[name] = min(best[name], run(contender(base, n, series, transport)))
                label = f"{setting}, {'raw 24 h series' if series else 'small JSON'}"
                extra = best["etl client"] - best["bare httpx"]
                print(
                    f"{label:30} bare httpx {best['bare httpx'] * 1e6:6.0f} us   etl client "
                    f"{best['etl client'] * 1e6:6.0f} us   (+{extra * 1e6:.0f} us per request, {n} requests)"
                )
    finally:
        emulator.terminate()
        emulator.wait()


if __name__ == "__main__":
    main()
