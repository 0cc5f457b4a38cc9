"""The contenders that are not `etl run`, each meant to run in its own process.

    python benchmarks/peers.py ceiling|ceiling-uvloop|ceiling-lean|naive|dlt --requests FILE [--out DIR]

FILE (written by run.py) holds the sign-in and the exact series requests `etl run` makes. Each
contender prints one JSON line: {"seconds": <time from sign-in to the last byte written>}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path


def _sign_in(client, spec: dict) -> str:
    """The Cookie header of a fresh session (the two session cookies, as etl sends them)."""
    response = client.post(
        spec["base_url"] + "/auth/login", params={"username": spec["username"], "password": spec["password"]}
    )
    response.raise_for_status()
    return "; ".join(f"{name}={response.cookies[name]}" for name in ("SEMSESSIONID", "issToken"))


async def ceiling(spec: dict, _out: Path, lean: bool = False) -> int:
    """The same requests with bare httpx at the same concurrency; bodies read and thrown away. `lean`:
    over etl's transport (etl.client.wire) instead of httpcore's."""
    import httpx

    n = spec["concurrency"]
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    transport = None
    if lean:
        from etl.client.wire import WireTransport

        transport = WireTransport(limits=limits)
    received = 0
    async with httpx.AsyncClient(limits=limits, timeout=60, transport=transport) as client:
        response = await client.post(
            spec["base_url"] + "/auth/login",
            params={"username": spec["username"], "password": spec["password"]},
        )
        headers = {"Cookie": "; ".join(f"{k}={response.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))}
        gate = asyncio.Semaphore(n)

        async def one(request: dict) -> None:
            nonlocal received
            async with gate:
                answer = await client.request(
                    request.get("method", "GET"),
                    spec["base_url"] + request["path"],
                    params=request["query"],
                    headers=headers,
                )
                answer.raise_for_status()
                received += len(answer.content)

        await asyncio.gather(*(one(r) for r in spec["requests"]))
    return received


def naive(spec: dict, out: Path) -> int:
    """What a first script looks like: one request after another, json, a DataFrame per answer,
    pandas concat, one to_parquet per series."""
    import httpx
    import pandas as pd

    frames: dict[str, list[pd.DataFrame]] = {"raw": [], "average": [], "candles": []}
    received = 0
    with httpx.Client(timeout=60) as client:
        cookie = _sign_in(client, spec)
        for r in spec["requests"]:
            answer = client.get(spec["base_url"] + r["path"], params=r["query"], headers={"Cookie": cookie})
            answer.raise_for_status()
            received += len(answer.content)
            body = json.loads(answer.content)
            frame = pd.DataFrame(body["candles" if r["series"] == "candles" else "points"])
            if frame.empty:
                continue
            frame["ts"] = pd.to_datetime(
                frame["timestmp"],
                utc=True,
                format="ISO8601" if r["series"] != "candles" else None,
                unit="ms" if r["series"] == "candles" else None,
            )
            frame = frame.drop(columns="timestmp")
            frame = frame[
                frame["ts"] < pd.Timestamp(r["end"], unit="ms", tz="UTC")
            ]  # the end is sent inclusively
            frame.insert(0, "kind", r["kind"])
            frame.insert(0, "param_id", r["param_id"])
            frame.insert(0, "object_id", r["object_id"])
            frames[r["series"]].append(frame)
    out.mkdir(parents=True, exist_ok=True)
    for series, parts in frames.items():
        if parts:
            pd.concat(parts, ignore_index=True).to_parquet(out / f"{series}.parquet", index=False)
    return received


def dlt_peer(spec: dict, out: Path) -> int:
    """dlt as its documentation suggests for many API calls: a resource listing the windows and a
    parallelized transformer fetching each one with dlt's REST client, into the filesystem
    destination as Parquet. One table per series, pages yielded whole."""
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    os.environ.setdefault("EXTRACT__WORKERS", str(spec["concurrency"]))  # same requests in flight as etl
    import dlt
    from dlt.sources.helpers.rest_client import RESTClient

    received = 0
    client = RESTClient(base_url=spec["base_url"])
    login = client.session.post(
        spec["base_url"] + "/auth/login", params={"username": spec["username"], "password": spec["password"]}
    )
    login.raise_for_status()
    client.headers = {"Cookie": "; ".join(f"{k}={login.cookies[k]}" for k in ("SEMSESSIONID", "issToken"))}

    @dlt.resource(selected=False)
    def windows():
        yield from spec["requests"]

    @dlt.transformer(data_from=windows, parallelized=True, table_name=lambda row: row["series"])
    def points(request: dict):
        nonlocal received
        answer = client.get(request["path"], params=request["query"])
        received += len(answer.content)
        key = "candles" if request["series"] == "candles" else "points"
        rows = [
            {
                "object_id": request["object_id"],
                "param_id": request["param_id"],
                "kind": request["kind"],
                "series": request["series"],
                **p,
            }
            for p in answer.json()[key]
            if _before_end(p["timestmp"], request["end"])
        ]
        if rows:
            yield rows

    pipeline = dlt.pipeline(
        pipeline_name="bench",
        pipelines_dir=str(out / "_dlt"),
        destination=dlt.destinations.filesystem(bucket_url=(out / "data").resolve().as_uri()),
        dataset_name="series",
    )
    pipeline.run(points, loader_file_format="parquet")
    return received


def _before_end(stamp: str | int, end: int) -> bool:
    """The end of a window is sent inclusively: a point exactly at it belongs to the next window."""
    if isinstance(stamp, int):
        return stamp < end
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000 < end


async def ceiling_lean(spec: dict, out: Path) -> int:
    return await ceiling(spec, out, lean=True)


CONTENDERS = {
    "ceiling": ceiling,
    "ceiling-uvloop": ceiling,
    "ceiling-lean": ceiling_lean,
    "naive": naive,
    "dlt": dlt_peer,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=sorted(CONTENDERS))
    parser.add_argument("--requests", required=True, type=Path)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    spec = json.loads(args.requests.read_text())
    run = CONTENDERS[args.contender]
    started = time.perf_counter()
    if asyncio.iscoroutinefunction(run):
        # etl run uses uvloop: this ceiling shows what the same loop gives bare httpx
        loop = asyncio.run if args.contender == "ceiling" else __import__("uvloop").run
        received = loop(run(spec, args.out))
    else:
        received = run(spec, args.out)
    json.dump({"seconds": time.perf_counter() - started, "bytes": received}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
