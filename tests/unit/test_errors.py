"""The exception tree etl/errors.py draws, and the error a client gets when no server answers. The client
against the emulator: tests/e2e/test_client.py."""

from __future__ import annotations

import pytest

from etl.client import RetryPolicy, SyncMonitoringClient
from etl.errors import RetriesExhausted


def test_server_down_exhausts_retries_with_a_clear_message():
    down = SyncMonitoringClient(
        "http://127.0.0.1:9/sem-restservices",
        "demo",
        "demo",
        retry=RetryPolicy(attempts=2, backoff_initial=0.01, deadline=5),
    )
    with down as c, pytest.raises(RetriesExhausted) as info:
        c.objects()
    assert info.value.exit_code == 4 and "gave up after 2 attempt" in str(info.value)


def test_the_exception_tree_drawn_in_errors_is_the_one_in_the_code():
    """etl/errors.py draws each class with its exit code, retryable and fatal: the drawing is checked."""
    import re

    import etl.errors as errors

    rows = re.findall(
        r"^\s+[│├└─ ]*(\w+)(?: \(\w+\))?\s+(\d+)\s+(yes|no)\s+(yes|no)", errors.__doc__, re.MULTILINE
    )
    drawn = {name: (int(code), retryable == "yes", fatal == "yes") for name, code, retryable, fatal in rows}
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.EtlError) and cls is not errors.RetriesExhausted
    }
    assert drawn.keys() == classes.keys()
    assert {name: (cls.exit_code, cls.retryable, cls.fatal) for name, cls in classes.items()} == drawn
    exhausted = errors.RetriesExhausted("gave up", errors.InvalidResponse("cut short"), 3)
    assert (exhausted.exit_code, exhausted.retryable, exhausted.fatal) == (6, False, False)


def test_without_frames_lets_go_of_what_the_frames_an_error_went_through_held():
    """A failed window keeps its error: not the locals (an answer's body) of the frames it was raised in."""
    import gc
    import weakref

    from etl.errors import InvalidResponse, without_frames

    class Body(bytearray):
        pass

    held: list[weakref.ref[Body]] = []

    def attempt() -> None:
        body = Body(1024)  # held by this frame while the error keeps its traceback
        held.append(weakref.ref(body))
        raise InvalidResponse("unreadable")

    def retried() -> RetriesExhausted:
        try:
            attempt()
        except InvalidResponse as exc:
            return RetriesExhausted("gave up", exc, 2)
        raise AssertionError

    gc.disable()  # the error must free it, not a collection of cycles
    try:
        error = retried()
        assert held[0]() is not None
        assert without_frames(error) is error and error.last.__traceback__ is None
        assert held[0]() is None
        assert str(error) == "gave up" and error.exit_code == 6
    finally:
        gc.enable()
