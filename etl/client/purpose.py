"""What each request is for, counted by the client (`ClientStats.purposes`): where a run's budget of
requests went, beside the floor an hourly run cannot go below (one request per parameter and series
with new data, plus the sign-in and the object list).

The caller names the purpose around its calls (`with purpose(CATALOG): ...`, or `set_purpose` at the
start of a task of its own); the session stamps it on each request it builds. A request sent again after
a failure counts as a retry, and a sign-in (the first, or again after a session ended) as the session's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

SESSION = "session"  # sign-ins
CATALOG = "catalog"  # objects, parameter lists and search, reference tables
NEW_DATA = "new_data"  # each parameter's series from its newest checkpoint on
HISTORY = "history"  # windows behind a parameter's newest checkpoint (a backfill, a hole)
PROBES = "probes"  # averages asked to find late, revised or returning data
RETRIES = "retries"  # a request sent again after a failure
OTHER = "other"  # anything not named (etl api, etl init)
PURPOSES = (SESSION, CATALOG, NEW_DATA, HISTORY, PROBES, RETRIES, OTHER)

_PURPOSE: ContextVar[str] = ContextVar("etl_request_purpose", default=OTHER)


def current() -> str:
    return _PURPOSE.get()


def set_purpose(name: str) -> None:
    """For the rest of the current task (each asyncio task has its own copy)."""
    _PURPOSE.set(name)


@contextmanager
def purpose(name: str) -> Iterator[None]:
    token = _PURPOSE.set(name)
    try:
        yield
    finally:
        _PURPOSE.reset(token)
