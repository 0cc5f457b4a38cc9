"""A server built differently from the emulator: the standard library's `ThreadingHTTPServer` (a thread
per connection, HTTP/1.1 keep-alive, TCP_NODELAY, one process) replaying a recording (servers/record.py).

    python benchmarks/servers/threaded.py --root DIR --port PORT [--latency 0.01] [--fallback URL]

Each request waits `--latency` seconds (time.sleep in its thread), then gets the recorded body, read
from its file. `--workers C --service-time T`: a pool of C workers each busy T seconds a request, the
others waiting for one (a semaphore): a server of limited capacity; each request's time in the server
(waiting and served, after the latency) is kept for `GET /_bench/stats` (`server_ms`, its p95). Sign-in is answered with the recorded user and two session cookies; no cookie is checked
afterwards. A request the recording lacks is passed to `--fallback` (the emulator) and counted.
`GET /_bench/stats` gives the counts; `PUT /_bench/latency?seconds=S` changes the latency.
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servers.layout import file_of  # noqa: E402

COOKIES = ("SEMSESSIONID=threaded-session; Path=/; HttpOnly", "issToken=threaded-token; Path=/")


class State:
    def __init__(self, root: Path, latency: float, fallback: str | None) -> None:
        self.root, self.latency, self.fallback = root, latency, fallback
        self.login = (root / "login.json").read_bytes()
        self.served = self.misses = 0
        self.fallback_cookie = ""  # a session of the fallback's own (the client's cookie is ours)
        self.lock = threading.Lock()
        self.workers: threading.Semaphore | None = None
        self.service_time = 0.0
        self.server_ms: list[float] = []  # each served request's time in the server


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    # TCP_NODELAY, as nginx (tcp_nodelay on), gunicorn and uvicorn set it: otherwise a body written after
    # its headers waits for the client's delayed ACK, and no client got past 0.73 of the latency bound
    disable_nagle_algorithm = True
    state: State

    def log_message(
        self, *args: object
    ) -> None:  # quiet: one line per request would cost more than the answer
        pass

    def handle(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client gone (wrk, stopped)
            super().handle()

    def _answer(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def _serve(self) -> None:
        self._drain()
        path, _, query = self.path.partition("?")
        state = self.state
        if path.startswith("/_bench/"):
            return self._control(path, query)
        if state.latency:
            time.sleep(state.latency)
        if state.workers is None:
            return self._answer_recorded(path, query)
        arrived = time.perf_counter()
        with state.workers:
            time.sleep(state.service_time)
            self._answer_recorded(path, query)
        with state.lock:
            state.server_ms.append((time.perf_counter() - arrived) * 1000)

    def _answer_recorded(self, path: str, query: str) -> None:
        state = self.state
        if path.endswith("/auth/login"):
            return self._answer(200, state.login, tuple(("Set-Cookie", c) for c in COOKIES))
        try:
            body = (state.root / file_of(path, query)).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return self._miss()
        with state.lock:
            state.served += 1
        self._answer(200, body)

    def _miss(self) -> None:
        state = self.state
        with state.lock:
            state.misses += 1
        if not state.fallback:
            return self._answer(404, b'{"error": "not recorded"}')
        url = urlsplit(state.fallback)
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        try:
            connection.request(self.command, self.path, headers={"Cookie": state.fallback_cookie})
            answer = connection.getresponse()
            self._answer(answer.status, answer.read())
        finally:
            connection.close()

    def _control(self, path: str, query: str) -> None:
        state = self.state
        if path == "/_bench/latency":
            state.latency = float(parse_qs(query)["seconds"][0])
        elif path == "/_bench/nothing":
            return self._answer(204, b"")
        elif path == "/_bench/reset":
            with state.lock:
                state.server_ms = []
        with state.lock:
            times = sorted(state.server_ms)
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))] if times else None
        self._answer(
            200,
            json.dumps(
                {
                    "served": state.served,
                    "misses": state.misses,
                    "latency": state.latency,
                    "timed": len(times),
                    "server_ms_p95": p95,
                }
            ).encode(),
        )

    do_GET = do_POST = do_PUT = _serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--fallback", help="scheme://host:port asked for what the recording lacks")
    parser.add_argument("--fallback-cookie", default="", help="the Cookie header of a session there")
    parser.add_argument("--workers", type=int, help="at most this many requests served at once")
    parser.add_argument("--service-time", type=float, default=0.0, help="seconds a worker spends a request")
    args = parser.parse_args()
    Handler.state = State(args.root, args.latency, args.fallback)
    Handler.state.fallback_cookie = args.fallback_cookie
    if args.workers:
        Handler.state.workers = threading.Semaphore(args.workers)
        Handler.state.service_time = args.service_time
    ThreadingHTTPServer.request_queue_size = 128  # 16 connections opened at once must not overflow it
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
