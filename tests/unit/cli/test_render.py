"""Tables people read: a cut cell says so, a time stamp is never cut (issue 21)."""

from __future__ import annotations

import pytest

from etl.cli.render import ELLIPSIS, WIDEST, echo_table, fit

A, B, C = "2026-11-01T00:00:00.000Z", "2026-11-02T00:00:00.000Z", "2026-11-03T00:00:00.000Z"


@pytest.mark.parametrize(
    "text, shown",
    [
        ("short", "short"),
        (f"{A}..{C}", f"{A}..{C}"),  # two characters over: the stamp stays whole
        (f"{A}..{B}, {B}..{C}", f"{A}..{B}{ELLIPSIS}"),
        (
            '{"id":1010,"controller":{"id":11,"name":"controller-11"},"x":1}',
            '{"id":1010,"controller":{"id":11,"name":"' + ELLIPSIS,
        ),
        ("x" * 60, "x" * (WIDEST - 1) + ELLIPSIS),
    ],
    ids=["short", "one interval", "two intervals", "nested JSON", "one long word"],
)
def test_a_cut_cell_ends_with_an_ellipsis_and_no_stamp_is_cut(text, shown):
    assert fit(text) == shown


def test_numbers_align_right(capsys):
    echo_table([{"name": "a", "points": 5}, {"name": "bb", "points": 12345}], numeric=["points"])
    assert capsys.readouterr().out.splitlines() == ["name  points", "a          5", "bb     12345"]
