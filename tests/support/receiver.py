"""A server for what etl sends on the side (OpenLineage events, OTLP traces): an HTTP receiver on a
loopback port that keeps each POST's path and body, and answers 200."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """What was POSTed to the server, in the order it came (`url` is its base URL)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.posts: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()

    @property
    def paths(self) -> list[str]:
        with self.lock:
            return [path for path, _ in self.posts]

    @property
    def events(self) -> list[dict[str, Any]]:
        """The bodies as JSON (lineage events)."""
        with self.lock:
            return [json.loads(body) for _, body in self.posts]

    def types(self) -> list[str]:
        return [e["eventType"] for e in self.events]


@contextmanager
def receiver() -> Iterator[Receiver]:
    """A receiver on a free loopback port for the block's length."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    got = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    server.got = got  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        got: Receiver = self.server.got  # type: ignore[attr-defined]
        with got.lock:
            got.posts.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass
