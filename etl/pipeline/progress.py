"""Progress: a bar on a terminal, a log line every few seconds otherwise."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("etl")


class Progress:
    def __init__(self, total_windows: int, enabled: bool | None = None, every: float = 10.0) -> None:
        self.total = total_windows
        self.done = 0
        self.points = 0
        self.every = every
        self._last = time.monotonic()
        self._bar = None
        if enabled if enabled is not None else sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("windows"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[points]} points"),
                TimeRemainingColumn(),
                transient=True,
            )
            self._task = self._bar.add_task("", total=total_windows, points=0)
            self._bar.start()

    def advance(self, windows: int, points: int) -> None:
        self.done += windows
        self.points += points
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, points=f"{self.points:,}")
        elif time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            log.info("progress: %d/%d windows, %s points", self.done, self.total, f"{self.points:,}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
