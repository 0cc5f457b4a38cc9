"""Per-process state that the API and the control API share: the clock and the request log."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

import orjson

from etl_emulator.answers import Record

REQUEST_LOG_MAX = 100_000  # entries kept in memory (oldest dropped)


class Clock:
    """The emulator's time: fixed (`fixed`, epoch ms) or the real time (None)."""

    def __init__(self, fixed: int | None = None) -> None:
        self.fixed = fixed

    def now(self) -> int:
        return self.fixed if self.fixed is not None else time.time_ns() // 1_000_000


class RequestLog:
    """The last REQUEST_LOG_MAX API calls, and all of them in a JSON-lines file when one is named."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.entries: deque[Record] = deque(maxlen=REQUEST_LOG_MAX)
        self._file = open(path, "ab") if path else None  # noqa: SIM115

    def record(self, entry: Record) -> None:
        self.entries.append(entry)
        if self._file:
            self._file.write(orjson.dumps(entry) + b"\n")
            self._file.flush()

    def clear(self) -> int:
        cleared = len(self.entries)
        self.entries.clear()
        return cleared

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None
