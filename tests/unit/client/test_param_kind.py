"""One rule reads a parameter record's kind, whichever listing it came from (etl.client.models.param_kind):
the markers the document leaves open (the type's field, a signal flag) all count."""

from __future__ import annotations

import pytest

from etl.client.models import Parameter, param_kind
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
    ],
)
def test_a_record_s_kind(record, listed, kind):
    assert param_kind(record, listed) is kind


def test_a_parameter_reads_its_kind_by_the_same_rule():
    flagged = Parameter(1003, "physical", 1, {"paramType": "physical", "signal": True})
    assert flagged.kind is S and flagged.raw()["kind"] == "signal"
    assert Parameter(1501, "calculated", 1, {"type": "signal"}).kind is C
    assert Parameter.listed_as(S) == "physical" and Parameter.listed_as(C) == "calculated"
