"""Run the emulator in a background thread (run_emulator, for tests), and talk to a running one's
control API (EmulatorControl). EmulatorConfig is re-exported here, where most callers look for it."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import httpx
import orjson
import uvicorn

from etl_emulator.answers import Record
from etl_emulator.app import Emulator, create_app
from etl_emulator.config import EmulatorConfig


class EmulatorControl:
    """Client of the control API (/_emulator/...) of an emulator at `url` (scheme://host:port)."""

    def __init__(self, url: str, verify: bool | ssl.SSLContext = True) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url + "/_emulator", timeout=10, verify=verify)

    def _call(self, method: str, path: str, body: object = None) -> Any:
        content = None if body is None else orjson.dumps(body)
        try:
            response = self._http.request(method, path, content=content)
        except httpx.TransportError:
            # A keep-alive connection the server closed for idling just as it was reused. Every control
            # call is idempotent: it is sent again, once, on a new connection.
            response = self._http.request(method, path, content=content)
        response.raise_for_status()
        return response.json()

    def _object(self, method: str, path: str, body: object = None) -> Record:
        """A control call that answers a JSON object."""
        return cast(Record, self._call(method, path, body))

    def _objects(self, method: str, path: str) -> list[Record]:
        """A control call that answers a JSON array of objects."""
        return cast(list[Record], self._call(method, path))

    def health(self) -> Record:
        return self._object("GET", "/health")

    def requests(self) -> list[Record]:
        """The request log: ts, method, path, query (no password), status, param_id, interval_ms, fault,
        queue_ms and server_ms (the time it waited for a worker, and in the server in all)."""
        return self._objects("GET", "/requests")

    def clear_requests(self) -> None:
        self._call("DELETE", "/requests")

    def faults(self) -> Record:
        return self._object("GET", "/faults")

    def set_faults(self, reset: bool = False, **changes: Any) -> Record:
        """Change the given fault settings (see Faults); reset=True first clears every fault."""
        return self._object("PUT", "/faults", {**changes, **({"reset": True} if reset else {})})

    def set_capacity(self, capacity: int | None, **settings: Any) -> Record:
        """Serve with `capacity` workers from now on (None: no bound); `settings`: service_time,
        queue_max. The requests that wait take freed workers at once."""
        return self.set_faults(capacity=capacity, **settings)

    def gaps(self, param_id: int, start_ms: int, end_ms: int) -> list[Record]:
        """The parameter's silent spans ({"start", "end"}, end excluded) overlapping the window."""
        return self._objects("GET", f"/gaps?param={param_id}&start={start_ms}&end={end_ms}")

    def clock(self) -> Record:
        return self._object("GET", "/clock")

    def set_clock(self, now_ms: int | None) -> Record:
        """Fix the emulator's clock at now_ms (None: the real time)."""
        return self._object("PUT", "/clock", {"now": now_ms})

    def fleet(self) -> Record:
        return self._object("GET", "/fleet")

    def set_fleet(self, **changes: Any) -> Record:
        """The fleet from now on: `objects` (a count), `added` and `removed` (parameter ids: analog ones
        below x500, calculated ones above), any of them; each replaces what was set before."""
        return self._object("PUT", "/fleet", changes)

    def commands(self) -> list[Record]:
        """External command runs: id, deviceId, extCommandId, commandData, login, ts."""
        return self._objects("GET", "/commands")

    def close(self) -> None:
        self._http.close()


class RunningEmulator(EmulatorControl):
    """An emulator serving in a background thread: `.url` (root), `.base_url` (root + base path)."""

    def __init__(
        self, config: EmulatorConfig, server: uvicorn.Server, thread: threading.Thread, port: int
    ) -> None:
        # A TLS emulator's certificate is its own CA: the control client trusts exactly that.
        verify = ssl.create_default_context(cafile=config.tls_cert) if config.tls_cert else True
        super().__init__(f"{config.scheme}://{config.host}:{port}", verify)
        self.config = config
        self.app = cast(Emulator, server.config.app)  # for in-process inspection
        self.port = port
        self.base_url = (
            self.url + "/" + config.base_path.strip("/") if config.base_path.strip("/") else self.url
        )
        self._server = server
        self._thread = thread

    def stop(self) -> None:
        self.close()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.app.close()


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app: Any, log_level: str = "warning", **kw: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        http="httptools",
        loop="uvloop",
        server_header=False,
        date_header=False,
        **kw,
    )


@contextmanager
def run_emulator(config: EmulatorConfig | None = None, *, port: int = 0) -> Iterator[RunningEmulator]:
    """Serve `config` on a free port (port=0) in a background thread until the block ends."""
    config = config or EmulatorConfig()
    sock = bind_socket(config.host, port)
    server = uvicorn.Server(uvicorn_config(create_app(config), **config.ssl_options()))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="emulator", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the emulator did not start")
        time.sleep(0.005)
    running = RunningEmulator(config, server, thread, sock.getsockname()[1])
    try:
        yield running
    finally:
        running.stop()
        sock.close()


__all__ = [
    "EmulatorConfig",
    "EmulatorControl",
    "RunningEmulator",
    "bind_socket",
    "run_emulator",
    "uvicorn_config",
]
