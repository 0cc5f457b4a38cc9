"""Progress: a bar on a terminal, a line that updates itself in a Jupyter notebook (IPython's display, no
widget package), a log line every few seconds otherwise."""

from __future__ import annotations

import html
import logging
import sys
import time
from typing import Any, Protocol

log = logging.getLogger("etl")

NOTEBOOK_EVERY = 0.5  # seconds between updates of a notebook's line: each is a message to the browser


class _View(Protocol):
    def show(self, done: int, points: int) -> None: ...

    def close(self, done: int, points: int) -> None: ...


class Progress:
    """`enabled` None: shown on a terminal (stderr) and in a notebook; True: shown even elsewhere (on
    stderr); False: log lines only."""

    def __init__(self, total_windows: int, enabled: bool | None = None, every: float = 10.0) -> None:
        self.total = total_windows
        self.done = 0
        self.points = 0
        self.every = every
        self._last = time.monotonic()
        self._view: _View | None = None
        if enabled is not False and in_a_notebook():
            self._view = _NotebookLine(total_windows)
        elif enabled if enabled is not None else sys.stderr.isatty():
            self._view = _TerminalBar(total_windows)

    def advance(self, windows: int, points: int) -> None:
        self.done += windows
        self.points += points
        if self._view is not None:
            self._view.show(self.done, self.points)
        elif time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            log.info("progress: %d/%d windows, %s points", self.done, self.total, f"{self.points:,}")

    def close(self) -> None:
        if self._view is not None:
            self._view.close(self.done, self.points)


def in_a_notebook() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel's shell), where IPython's display reaches the
    notebook; nothing is imported for it otherwise."""
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    if zmqshell is None:
        return False
    from IPython import get_ipython

    return isinstance(get_ipython(), zmqshell.ZMQInteractiveShell)


class _TerminalBar:
    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("windows"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[points]} points"),
            TimeRemainingColumn(),
            transient=True,
            console=Console(stderr=True),  # stdout is the command's output (its summary, JSON)
        )
        self._task = self._bar.add_task("", total=total, points=0)
        self._bar.start()

    def show(self, done: int, points: int) -> None:
        self._bar.update(self._task, completed=done, points=f"{points:,}")

    def close(self, done: int, points: int) -> None:
        self._bar.stop()


class _NotebookLine:
    """One output of the cell, replaced in place (`display_id`) at most every NOTEBOOK_EVERY seconds."""

    def __init__(self, total: int) -> None:
        from IPython.display import display

        self._started = self._shown = time.monotonic()
        self._line = ProgressLine(0, total, 0, None)
        show: Any = display  # IPython's display is untyped
        self._handle: Any = show(self._line, display_id=True)

    def _update(self, done: int, points: int, seconds: float | None) -> None:
        self._line = ProgressLine(done, self._line.total, points, seconds)
        self._handle.update(self._line)

    def show(self, done: int, points: int) -> None:
        now = time.monotonic()
        if now - self._shown >= NOTEBOOK_EVERY:
            self._shown = now
            left = (now - self._started) / done * (self._line.total - done) if done else None
            self._update(done, points, left)

    def close(self, done: int, points: int) -> None:
        self._update(done, points, None)


class ProgressLine:
    """What a notebook shows: an HTML progress bar, or a line of text where HTML is not rendered."""

    def __init__(self, done: int, total: int, points: int, left: float | None) -> None:
        self.done, self.total, self.points, self.left = done, total, points, left

    def text(self) -> str:
        left = f", about {self.left:.0f}s left" if self.left is not None else ""
        return f"windows {self.done}/{self.total}, {self.points:,} points{left}"

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return (
            f'<progress value="{self.done}" max="{max(self.total, 1)}" style="width: 20em"></progress> '
            f"<code>{html.escape(self.text())}</code>"
        )
