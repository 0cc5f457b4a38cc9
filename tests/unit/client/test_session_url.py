"""Plain query values are put into the URL by etl, as httpx would encode them (etl/client/session.py)."""

from __future__ import annotations

import httpx
import pytest

from etl.client.session import _url


@pytest.mark.parametrize(
    "params",
    [
        {"count": 10000},
        {"objectId": 5, "sensorLocationId": 2},
        {"oid": [1, 2], "limit": 1000, "offset": 0},
        {"tags": "a b&c"},
        {"calc": "true", "state": -1},
        {"flag": True},
        None,
        {},
    ],
)
def test_the_url_is_the_one_httpx_would_build(params):
    client = httpx.AsyncClient()
    url, rest = _url("http://host/base/db/x", params)
    ours = client.build_request("GET", url, params=rest).url
    assert str(ours) == str(client.build_request("GET", "http://host/base/db/x", params=params).url)
