"""Checkpoints in groups: slabs that finish while one is written share the next, and a failure reaches
every slab of its group."""

from __future__ import annotations

import asyncio
import threading

import pytest

from etl.errors import StorageError
from etl.model import ParamKind, Series, Window, Windows
from etl.pipeline.group_commit import GroupCommit
from etl.state.arrivals import Arrivals
from tests.support.turns import until


def _windows(param_id: int) -> Windows:
    return Windows.of(Series.RAW, [Window(param_id, 1, ParamKind.PHYSICAL, Series.RAW, 0, 86_400_000)])


class _Store:
    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.first = threading.Event()  # the first checkpoint is being written
        self.go = threading.Event()
        self.fail_on = fail_on

    def commit(self, *windows: Windows, arrivals: Arrivals | None = None) -> None:
        self.calls.append([int(w.param_id[0]) for w in windows])
        if len(self.calls) == 1:
            self.first.set()
            self.go.wait(10)
        if len(self.calls) == self.fail_on:
            raise StorageError("disk full")


async def _slabs(store: _Store, count: int) -> list[BaseException | None]:
    group = GroupCommit(store)  # type: ignore[arg-type]
    first = asyncio.ensure_future(group.commit(_windows(1), Arrivals()))
    await asyncio.to_thread(store.first.wait, 10)
    rest = [asyncio.ensure_future(group.commit(_windows(p), Arrivals())) for p in range(2, count + 1)]
    if not store.go.is_set():
        await until(
            lambda: len(group.waiting) == count - 1, "every other slab waiting for the next checkpoint"
        )
    store.go.set()
    return await asyncio.gather(first, *rest, return_exceptions=True)


def test_slabs_finishing_during_a_checkpoint_share_the_next():
    store = _Store()
    outcomes = asyncio.run(_slabs(store, 5))
    assert outcomes == [None] * 5
    assert store.calls == [[1], [2, 3, 4, 5]]


def test_a_failed_group_checkpoint_fails_every_slab_in_it():
    store = _Store(fail_on=2)
    outcomes = asyncio.run(_slabs(store, 4))
    assert outcomes[0] is None
    assert all(isinstance(o, StorageError) for o in outcomes[1:]), outcomes


@pytest.mark.parametrize("count", [1, 3])
def test_every_slab_returns_only_once_its_windows_are_checkpointed(count):
    store = _Store()
    store.go.set()
    outcomes = asyncio.run(_slabs(store, count))
    assert outcomes == [None] * count
    assert sorted(p for call in store.calls for p in call) == list(range(1, count + 1))
