"""A compiled client replaying a recording's requests: `wrk` (C, one thread, `concurrency` keep-alive
connections), driven by a Lua script that hands out the requests in order and says when every one has
been answered. Bodies are read in full (wrk parses each answer) and thrown away. wrk runs for a set
duration; the script writes a line to stderr at its first request and at its last answer, this
process times the two lines as they arrive and then stops wrk (SIGINT).

    python benchmarks/servers/wrk.py --recording DIR --url URL [--concurrency 16] [--cookie C]

Prints one JSON line: {"seconds": first request to last answer, "requests", "errors"}.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servers.record import Recording  # noqa: E402

SCRIPT = r"""
local list, n, next_i, answered, errors = {}, 0, 0, 0, 0
local spare

-- Built in init(): wrk.host is known by then (HTTP/1.1 wants a Host header; nginx refuses a request
-- without one).
function init(args)
  local cookie = os.getenv("WRK_COOKIE") or ""
  for line in io.lines(os.getenv("WRK_REQUESTS")) do
    local method, uri = line:match("^(%S+) (.*)$")
    n = n + 1
    list[n] = wrk.format(method, uri, {["Host"] = wrk.host, ["Cookie"] = cookie, ["Accept"] = "application/json"})
  end
  spare = wrk.format("GET", "/_bench/nothing", {["Host"] = wrk.host})
end
local checked = false

function request()
  -- wrk asks once before the run, to check what it gets (wrk 4.1, after init()): not sent
  if not checked then checked = true return list[1] end
  if next_i == 0 then io.stderr:write("start\n") end
  next_i = next_i + 1
  if next_i <= n then return list[next_i] end
  return spare  -- asked only while the last answers are on their way; not counted
end

function response(status, headers, body)
  if status == 200 then answered = answered + 1 elseif status ~= 204 and status ~= 404 then errors = errors + 1 end
  if answered + errors >= n then
    io.stderr:write(string.format("answered %d errors %d\n", answered, errors))
    wrk.thread:stop()
    answered = -1e9  -- once
  end
end
"""


def missing() -> str | None:
    return None if shutil.which("wrk") else "wrk is not installed (make bench-tools: Debian's wrk)"


def replay(recording: Recording, url: str, concurrency: int, cookie: str = "") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        listing, script = Path(tmp) / "requests.txt", Path(tmp) / "replay.lua"
        listing.write_text("".join(f"{r.method} {r.uri}\n" for r in recording.requests))
        script.write_text(SCRIPT)
        proc = subprocess.Popen(
            ["wrk", "-t1", f"-c{concurrency}", "-d7200s", "--timeout", "120s", "-s", str(script), url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={"WRK_REQUESTS": str(listing), "WRK_COOKIE": cookie, "PATH": "/usr/bin:/bin"},
        )
        assert proc.stderr is not None
        started = counts = None
        # A request wrk gave up on is never answered: stop it after a generous while all the same.
        watchdog = threading.Timer(120 + 0.1 * len(recording.requests), proc.send_signal, [signal.SIGINT])
        watchdog.start()
        try:
            for line in proc.stderr:
                if line.startswith("start") and started is None:
                    started = time.perf_counter()
                elif found := re.match(r"answered (-?\d+) errors (\d+)", line):
                    seconds = time.perf_counter() - (started or 0.0)
                    counts = found
                    break
        finally:
            watchdog.cancel()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if started is None or counts is None:
        raise RuntimeError(f"wrk ended before answering every request (exit {proc.returncode})")
    return {"seconds": seconds, "requests": int(counts.group(1)), "errors": int(counts.group(2))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, required=True)
    parser.add_argument("--url", required=True, help="scheme://host:port")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cookie", default="")
    args = parser.parse_args()
    json.dump(replay(Recording.load(args.recording), args.url, args.concurrency, args.cookie), sys.stdout)
    print()


if __name__ == "__main__":
    main()
