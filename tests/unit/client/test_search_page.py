"""The paged search's body as servers write it (the document leaves it open): a bare array or the common
envelopes, read in one place (etl.client.api._page); anything else is one line naming what came."""

from __future__ import annotations

import pytest

from etl.client.api import _page
from etl.client.models import SearchPage
from etl.errors import InvalidResponse

RECORDS = [{"id": 1001}, {"id": 1002}]
SPRING = {
    "content": RECORDS,
    "pageable": {"pageNumber": 0, "pageSize": 1000, "offset": 0, "paged": True},
    "totalElements": 2,
    "totalPages": 1,
    "last": True,
    "size": 1000,
    "number": 0,
    "numberOfElements": 2,
    "first": True,
    "empty": False,
}


@pytest.mark.parametrize(
    "body, page",
    [
        (RECORDS, SearchPage(RECORDS)),
        ([], SearchPage([])),
        ({"total": 32, "items": RECORDS}, SearchPage(RECORDS, 32, "items")),
        (SPRING, SearchPage(RECORDS, 2, "content")),
        ({"data": RECORDS}, SearchPage(RECORDS, None, "data")),
        ({"count": 7, "next": None, "previous": None, "results": RECORDS}, SearchPage(RECORDS, 7, "results")),
        ({"rows": [], "totalCount": 0}, SearchPage([], 0, "rows")),
        ({"items": RECORDS, "total": "many"}, SearchPage(RECORDS, None, "items")),  # a total it cannot read
        ({"items": RECORDS, "total": True}, SearchPage(RECORDS, None, "items")),
        ({"items": RECORDS, "total": -1}, SearchPage(RECORDS, None, "items")),
    ],
    ids=["array", "empty", "items", "spring", "data", "results", "rows", "text total", "bool total", "neg"],
)
def test_a_page_in_any_common_envelope(body, page):
    assert _page(body, "GET /search/params") == page


@pytest.mark.parametrize(
    "body, words",
    [
        ({"error": "x", "status": 500}, "got an object of keys 'error', 'status'"),
        ({}, "got an object of keys (none)"),
        ({"items": RECORDS, "data": RECORDS}, "got an object with arrays under items, data"),
        ({"items": {"a": 1}}, "got an object of keys 'items'"),
        ("text", "got str"),
        (None, "got NoneType"),
    ],
)
def test_anything_else_is_one_line(body, words):
    with pytest.raises(InvalidResponse) as info:
        _page(body, "GET /search/params")
    message = str(info.value)
    assert message.startswith(
        "GET /search/params: expected a JSON array, or an object holding one under items"
    )
    assert message.endswith(words) and "\n" not in message
