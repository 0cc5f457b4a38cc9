"""One rule reads a parameter record's kind, whichever listing it came from (etl.client.models.param_kind):
the markers the document leaves open (the type's field, a signal flag) all count."""

from __future__ import annotations

import pytest

from etl.client.models import Parameter, param_kind, type_shape
from etl.model import ParamKind

P, C, S = ParamKind.PHYSICAL, ParamKind.CALCULATED, ParamKind.SIGNAL


@pytest.mark.parametrize(
    "record, listed, kind",
    [
        ({"type": "analog"}, "physical", P),
        ({"type": "signal"}, "physical", S),
        ({"paramType": "SIGNAL"}, "physical", S),
        ({"parameterType": "Signal"}, None, S),
        ({"paramType": "physical", "signal": True}, "physical", S),
        ({"paramType": "physical", "signal": "true"}, None, S),
        ({"type": "analog", "isSignal": 1}, None, S),
        ({"type": "analog", "signal": False}, "physical", P),
        ({"type": "analog", "signal": None}, None, P),
        ({}, "physical", P),  # the list says physical; nothing says signal
        ({"type": "signal"}, "calculated", C),  # a calculated parameter is never a signal
        ({"signal": True}, "calculated", C),
        ({"type": "calculated"}, None, C),
        ({"paramType": "CALC"}, None, C),
        ({"type": "calculated"}, "physical", P),  # the list it came from wins over its type
        ({"name": "x"}, None, None),  # a search record naming no type: unknown
        ({"type": ""}, None, None),
        ({"signal": True}, None, S),
        # The type as an object {id, name}: read by its name, or by its id where that is a word.
        ({"paramType": {"id": 2, "name": "calculated"}}, None, C),
        ({"type": {"id": 3, "name": "Signal"}}, "physical", S),
        ({"type": {"id": 1, "name": "analog"}}, None, P),
        ({"type": {"id": "calculated"}}, None, C),
        ({"type": {"id": 2, "name": ""}}, None, None),  # a code alone names no type
        ({"type": {"id": "2"}}, None, None),
        ({"type": 2}, None, None),
        ({"type": {"id": 2}}, "calculated", C),
    ],
)
def test_a_record_s_kind(record, listed, kind):
    assert param_kind(record, listed) is kind


def test_a_parameter_reads_its_kind_by_the_same_rule():
    flagged = Parameter(1003, "physical", 1, {"paramType": "physical", "signal": True})
    assert flagged.kind is S and flagged.raw()["kind"] == "signal"
    assert Parameter(1501, "calculated", 1, {"type": "signal"}).kind is C
    assert Parameter.listed_as(S) == "physical" and Parameter.listed_as(C) == "calculated"


def test_the_shape_of_a_type_in_etl_init_s_words():
    assert [
        type_shape(r)
        for r in (
            {"type": "analog"},
            {"paramType": {"id": 2, "name": "calculated"}},
            {"type": {"id": 2}},
            {"type": 2},
            {"name": "x"},
        )
    ] == ["text", "object", "object without a name", "number", None]
