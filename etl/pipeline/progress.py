"""Progress: a bar on a terminal, a line that updates itself in a Jupyter notebook (IPython's display, no
widget package), a log line every few seconds otherwise."""

from __future__ import annotations

import html
import logging
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

log = logging.getLogger("etl")

NOTEBOOK_EVERY = 0.5  # seconds between updates of a notebook's line: each is a message to the browser
NOTHING_NEW = "nothing new: the checkpoints already cover this window"  # the summary says it too


@dataclass(frozen=True)
class ProgressLine:
    """Where a run's windows stand, in the summary's terms: what a notebook shows (an HTML bar, or a line
    of text where HTML is not rendered)."""

    total: int
    done: int = 0  # written
    points: int = 0
    failed: int = 0
    left: float | None = None  # seconds, estimated while the run goes on
    left_open: int = 0  # at the end: planned windows a stop left for the next run
    stopped: str | None = None  # what stopped the run (RunSummary.stopped)

    def text(self) -> str:
        if not self.total:
            return NOTHING_NEW
        parts = [f"windows {self.done}/{self.total} written", f"{self.points:,} points"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.left_open:
            stopped = f" (stopped: {self.stopped.replace('_', ' ')})" if self.stopped else ""
            parts.append(f"{self.left_open} left open{stopped}")
        if self.left is not None:
            parts.append(f"about {self.left:.0f}s left")
        return ", ".join(parts)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        if not self.total:
            return f"<code>{html.escape(self.text())}</code>"
        return (
            f'<progress value="{self.done}" max="{self.total}" style="width: 20em"></progress> '
            f"<code>{html.escape(self.text())}</code>"
        )


class _View(Protocol):
    def show(self, line: ProgressLine) -> None: ...

    def close(self, line: ProgressLine) -> None: ...


class Progress:
    """`enabled` None: shown on a terminal (stderr) and in a notebook; True: shown even elsewhere (on
    stderr); False: log lines only. It counts the windows written and failed, as the summary does."""

    def __init__(self, total_windows: int, enabled: bool | None = None, every: float = 10.0) -> None:
        self.line = ProgressLine(total_windows)
        self.every = every
        self._started = self._last = time.monotonic()
        self._view: _View | None = None
        if enabled is not False and in_a_notebook():
            self._view = _NotebookLine(self.line)
        elif total_windows and (enabled if enabled is not None else sys.stderr.isatty()):
            self._view = _TerminalBar(self.line)

    def advance(self, windows: int, points: int, failed: int = 0) -> None:
        """`windows` more written (with their `points`), `failed` more given up on."""
        line = self.line
        done = line.done + windows
        elapsed = time.monotonic() - self._started
        left = elapsed / done * (line.total - done - line.failed - failed) if done else None
        self.line = replace(
            line, done=done, points=line.points + points, failed=line.failed + failed, left=left
        )
        if self._view is not None:
            self._view.show(self.line)
        elif time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            log.info("progress: %s", self.line.text())

    def close(self, left_open: int = 0, stopped: str | None = None) -> None:
        """The last word: with what a stop left open for the next run, as the summary says it."""
        self.line = replace(self.line, left=None, left_open=left_open, stopped=stopped)
        if self._view is not None:
            self._view.close(self.line)


def in_a_notebook() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel's shell), where IPython's display reaches the
    notebook; nothing is imported for it otherwise."""
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    if zmqshell is None:
        return False
    from IPython import get_ipython

    return isinstance(get_ipython(), zmqshell.ZMQInteractiveShell)


class _TerminalBar:
    def __init__(self, line: ProgressLine) -> None:
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
        self._task = self._bar.add_task("", total=line.total, points=0)
        self._bar.start()

    def show(self, line: ProgressLine) -> None:
        self._bar.update(self._task, completed=line.done + line.failed, points=f"{line.points:,}")

    def close(self, line: ProgressLine) -> None:
        self._bar.stop()


class _NotebookLine:
    """One output of the cell, replaced in place (`display_id`) at most every NOTEBOOK_EVERY seconds."""

    def __init__(self, line: ProgressLine) -> None:
        from IPython.display import display

        self._shown = time.monotonic()
        show: Any = display  # IPython's display is untyped
        self._handle: Any = show(line, display_id=True)

    def show(self, line: ProgressLine) -> None:
        now = time.monotonic()
        if now - self._shown >= NOTEBOOK_EVERY:
            self._shown = now
            self._handle.update(line)

    def close(self, line: ProgressLine) -> None:
        self._handle.update(line)
