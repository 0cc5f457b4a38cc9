"""Requests in flight over an `etl run`: the run in this process, `httpx.AsyncClient.send` timed.

    python benchmarks/inflight.py [--step 0.1] -- run -c CONFIG [etl run options]

Prints the mean number of requests in flight while series requests were being made, the time from the
first request to the first series request, and the number in flight per `--step` seconds, e.g.
`1 14 15 16 ...`. A run that keeps `extract.concurrency` requests in flight prints that number. The
time a request counts is httpx's: from sending it to its body read, so an event loop slow to read an
answer keeps it in flight.
"""

from __future__ import annotations

import argparse
import atexit
import json
import runpy
import sys
import time

import httpx

SERIES = ("/measure/", "/calcvalue/", "/signal/")


def timeline(spans: list[tuple[float, float]], step: float) -> list[float]:
    t0 = min(s for s, _ in spans)
    out = [0.0] * (int((max(e for _, e in spans) - t0) / step) + 1)
    for s, e in spans:
        s, e = s - t0, e - t0
        i = int(s / step)
        while s < e:
            edge = min(e, (i + 1) * step)
            out[i] += (edge - s) / step
            s, i = edge, i + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=float, default=0.1, help="seconds per figure of the timeline")
    parser.add_argument("etl", nargs=argparse.REMAINDER, help="the etl command line, after --")
    args = parser.parse_args()
    spans: list[tuple[float, float, str]] = []
    send = httpx.AsyncClient.send

    async def timed(self: httpx.AsyncClient, request: httpx.Request, **kw: object) -> httpx.Response:
        started = time.perf_counter()
        try:
            return await send(self, request, **kw)  # type: ignore[arg-type]
        finally:
            spans.append((started, time.perf_counter(), request.url.path))

    httpx.AsyncClient.send = timed  # type: ignore[method-assign]

    def report() -> None:
        series = [(s, e) for s, e, path in spans if any(k in path for k in SERIES)]
        if not series:
            return
        first, last = min(s for s, _ in series), max(e for _, e in series)
        doc = {
            "requests": len(spans),
            "series_requests": len(series),
            "mean_in_flight": round(sum(e - s for s, e in series) / (last - first), 2),
            # every request (discovery, reference tables) over the same stretch: the slots in use
            "mean_in_flight_all": round(
                sum(max(0.0, min(e, last) - max(s, first)) for s, e, _ in spans) / (last - first), 2
            ),
            "first_series_after_s": round(first - min(s for s, _, _ in spans), 3),
            "series_phase_s": round(last - first, 3),
            "after_last_series_s": round(time.perf_counter() - last, 3),  # writes, commits, summary
            "timeline": [round(x) for x in timeline(series, args.step)],
        }
        print(json.dumps(doc), file=sys.stderr, flush=True)

    # At exit, however the command ends the process (etl/cli/app.py runs the atexit handlers before os._exit).
    atexit.register(report)
    sys.argv = ["etl", *[a for a in args.etl if a != "--"]]
    runpy.run_module("etl", run_name="__main__")


if __name__ == "__main__":
    main()
