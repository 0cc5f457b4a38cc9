"""The run's trace (`telemetry:` in the config): the stages that time themselves (discovery, each slab,
each commit) take it from `current()`, which the run sets for its length (etl/pipeline/telemetry.py
makes the OpenTelemetry one). Without telemetry it is a no-op: a context variable read per stage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Protocol

Value = int | float | str | bool


class Span(Protocol):
    def set(self, **attributes: Value) -> None:
        """Attributes known once the work is done (points, requests...)."""


class Trace(Protocol):
    def span(self, name: str, **attributes: Value) -> AbstractContextManager[Span]:
        """A span over the block, a child of the run's."""


class _NoSpan:
    def set(self, **attributes: Value) -> None:
        pass


class _Off:
    def span(self, name: str, **attributes: Value) -> AbstractContextManager[Span]:
        return nullcontext(_NoSpan())


OFF: Trace = _Off()
_current: ContextVar[Trace] = ContextVar("etl_trace", default=OFF)


def current() -> Trace:
    return _current.get()


@contextmanager
def tracing(trace: Trace | None) -> Iterator[None]:
    """`trace` is the current one for the block (and the tasks it starts)."""
    token = _current.set(trace or OFF)
    try:
        yield
    finally:
        _current.reset(token)
