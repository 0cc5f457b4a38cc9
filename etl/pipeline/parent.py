"""The orchestrator's run that started this one, as lineage names it (the parent run facet)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class ParentRun:
    """The orchestrator's run (a Dagster run, an Airflow task instance) that started this one."""

    namespace: str
    name: str
    run_id: str  # a UUID
    root: ParentRun | None = None

    @classmethod
    def parse(cls, text: str | None, root: str | None = None) -> ParentRun | None:
        """`namespace/name/run_id`, the form of OPENLINEAGE_PARENT_ID and of Airflow's
        `lineage_parent_id` macro (the namespace may hold slashes); None when it is not that."""
        parts = (text or "").strip().rsplit("/", 2)
        if len(parts) != 3 or not all(parts):
            return None
        namespace, name, run_id = parts
        return cls(namespace, name, run_id, root=cls.parse(root))


_parent: ContextVar[ParentRun | None] = ContextVar("etl_parent_run", default=None)


@contextmanager
def parent_run(parent: ParentRun | None) -> Iterator[None]:
    """Runs started inside name `parent` as the run that started them (etl.dagster does)."""
    token = _parent.set(parent)
    try:
        yield
    finally:
        _parent.reset(token)


def parent() -> ParentRun | None:
    """The run that started this one: `parent_run`'s, else OPENLINEAGE_PARENT_ID's (with
    OPENLINEAGE_ROOT_PARENT_ID), as an orchestrator passes them to a task's process."""
    return _parent.get() or ParentRun.parse(
        os.environ.get("OPENLINEAGE_PARENT_ID"), os.environ.get("OPENLINEAGE_ROOT_PARENT_ID")
    )
