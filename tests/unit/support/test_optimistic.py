"""Compare-and-swap with a bounded retry (etl/support/optimistic.py), the one retry of the six writes that
may race another writer's: a lost race is planned again after a wait that doubles, up to the attempt limit;
any other error is raised at once."""

from __future__ import annotations

import pytest

from etl.errors import LostRace, StorageError
from etl.support import optimistic


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(optimistic, "sleep", slept.append)
    return slept


def test_a_lost_race_is_planned_again_until_it_wins(waits):
    calls: list[str] = []

    def attempt() -> str:
        calls.append("attempt")
        if calls.count("attempt") < 3:
            raise LostRace("taken")
        return "swapped"

    assert optimistic.swap(attempt, again=lambda: calls.append("again")) == "swapped"
    assert calls == ["attempt", "again", "attempt", "again", "attempt"]
    assert 0.01 <= waits[0] <= 0.05 and 0.02 <= waits[1] <= 0.1  # doubling, jittered


def test_the_last_loss_is_raised_after_the_attempt_limit(waits):
    attempts: list[int] = []

    def attempt() -> None:
        attempts.append(1)
        raise LostRace(f"cannot update x: lost {len(attempts)}")

    with pytest.raises(StorageError, match="lost 8$"):
        optimistic.swap(attempt)
    assert len(attempts) == optimistic.ATTEMPTS and len(waits) == optimistic.ATTEMPTS - 1


def test_an_error_the_backend_does_not_call_a_lost_race_is_raised_at_once(waits):
    def attempt() -> None:
        raise LostRace("not this backend's")

    with pytest.raises(LostRace):
        optimistic.swap(attempt, lost=lambda exc: isinstance(exc, KeyError))
    assert waits == []
