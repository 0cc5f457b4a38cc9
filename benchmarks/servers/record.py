"""A recording: every request one `etl run` made (from the emulator's request log), with the emulator's
answer to it, stored so that other servers can replay it.

Layout under the recording's root: `requests.json` (the requests in the order they came, sign-in
excepted) and `files/<path>/@<query>` holding each answer's body, where <query> is the query string as
etl sends it (httpx's encoding). A query too long for a file name is stored as `files/long/<sha1>`, and
`long.json` maps its request URI there. nginx serves these files as they are (servers/nginx.py);
servers/threaded.py reads them per request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from servers.layout import file_of

SIGN_IN = "/auth/login"


def query_string(query: dict) -> str:
    """The query as etl's client encodes it (httpx): repeated keys in order, values as logged."""
    return str(httpx.QueryParams(query))


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # from the server's root, base path included
    query: str

    @property
    def uri(self) -> str:
        return self.path + ("?" + self.query if self.query else "")

    @property
    def series(self) -> str | None:
        """raw, average or candles for a measurement request, else None."""
        parts = self.path.split("/")
        if not any(p in ("measure", "calcvalue", "signal") for p in parts):
            return None
        return "average" if "average" in parts else "candles" if "candles" in parts else "raw"

    @property
    def window(self) -> tuple[int, int]:
        """A measurement request's [start, end] (epoch ms), from its path."""
        start, end = self.path.rstrip("/").split("/")[-2:]
        return int(start), int(end)

    @property
    def param_id(self) -> int:
        parts = [p for p in self.path.split("/") if p.isdigit()]
        return int(parts[0])


@dataclass
class Recording:
    root: Path
    base_path: str  # e.g. /sem-restservices
    requests: list[Request]
    login_body: bytes

    def body(self, request: Request) -> bytes:
        return (self.root / file_of(request.path, request.query)).read_bytes()

    @classmethod
    def load(cls, root: Path) -> Recording:
        doc = json.loads((root / "requests.json").read_text())
        return cls(
            root,
            doc["base_path"],
            [Request(*r) for r in doc["requests"]],
            (root / "login.json").read_bytes(),
        )


def runs_of_log(log: Path) -> list[list[Request]]:
    """The successful requests of a request log (JSON lines), in order, a list per run (each run
    starts with a sign-in; sign-ins are left out)."""
    runs: list[list[Request]] = []
    for line in log.read_bytes().splitlines():
        entry = orjson.loads(line)
        if entry["path"].endswith(SIGN_IN):
            runs.append([])
        elif entry.get("status") == 200 and runs:
            runs[-1].append(Request(entry["method"], entry["path"], query_string(entry.get("query") or {})))
    return runs


async def _fetch_all(server: str, requests: list[Request], root: Path, login: tuple[str, str]) -> bytes:
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(base_url=server, timeout=120, limits=limits) as client:
        base = requests[0].path.split("/")[1] if requests else ""
        answer = await client.post(f"/{base}{SIGN_IN}", params={"username": login[0], "password": login[1]})
        answer.raise_for_status()
        cookie = "; ".join(f"{k}={answer.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))
        gate = asyncio.Semaphore(16)

        async def one(r: Request) -> None:
            async with gate:
                got = await client.request(r.method, r.uri, headers={"Cookie": cookie})
            got.raise_for_status()
            target = root / file_of(r.path, r.query)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(got.content)

        await asyncio.gather(*(one(r) for r in dict.fromkeys(requests)))
        return answer.content


def record(
    server: str, base_path: str, log: Path, root: Path, login: tuple[str, str] = ("demo", "demo")
) -> Recording:
    """Ask `server` (the emulator, at scheme://host:port) again for every request of the runs in `log`,
    and store its answers under `root`. The emulator's clock is fixed, so it answers as it did to etl.
    The recording's request list (what the replays send) is the first run's."""
    runs = runs_of_log(log)
    requests = runs[0]
    root.mkdir(parents=True, exist_ok=True)
    login_body = asyncio.run(_fetch_all(server, [r for run in runs for r in run], root, login))
    (root / "login.json").write_bytes(login_body)
    (root / "requests.json").write_text(
        json.dumps({"base_path": base_path, "requests": [[r.method, r.path, r.query] for r in requests]})
    )
    everything = dict.fromkeys(r for run in runs for r in run)
    long = {
        r.uri: "/" + file_of(r.path, r.query)
        for r in everything
        if file_of(r.path, r.query).startswith("files/long/")
    }
    (root / "long.json").write_text(json.dumps(long))
    return Recording(root, base_path, requests, login_body)
