"""The client's options as one value (etl/client/options.py): made from a config, or from the client's
keywords, never from both."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from etl.client import ClientOptions, MonitoringClient, RetryPolicy, SyncMonitoringClient
from etl.config import parse_config
from tests.support.configs import config_dict


def test_a_config_makes_every_option():
    data = config_dict("https://host.example/sem-restservices", "out", extract={"concurrency": 5})
    data["source"].update(
        sign_in="form",
        connect_timeout=3,
        read_timeout=7,
        request_timeout=9,
        max_answer_mb=2,
        proxy="http://proxy.corp:3128",
        transport="httpx",
    )
    options = ClientOptions.from_config(parse_config(data))
    assert options == ClientOptions(
        sign_in="form",
        timeout=httpx.Timeout(7, connect=3),
        request_timeout=9,
        max_answer_bytes=2 * 1024**2,
        retry=RetryPolicy(attempts=8, backoff_initial=0.01, backoff_max=0.2, deadline=60),
        max_in_flight=5,
        verify=True,
        proxy="http://proxy.corp:3128",
        http_transport="httpx",
    )
    assert options.limits == httpx.Limits(max_connections=5, max_keepalive_connections=5)


def test_the_clients_take_the_options_or_the_keywords_not_both():
    options = ClientOptions(max_in_flight=3, retry=RetryPolicy(attempts=2))

    async def made(**kw: Any) -> ClientOptions:
        async with MonitoringClient("http://server", "demo", "pw", **kw) as client:
            return client.session.options

    assert asyncio.run(made(options=options)) is options
    assert asyncio.run(made(max_in_flight=3, retry=RetryPolicy(attempts=2))) == options
    assert asyncio.run(made()) == ClientOptions()
    with pytest.raises(TypeError, match="not both"):
        asyncio.run(made(options=options, max_in_flight=4))
    with pytest.raises(TypeError, match="not both"):
        SyncMonitoringClient("http://server", "demo", "pw", options=options, sign_in="form")
    with SyncMonitoringClient("http://server", "demo", "pw", options=options) as sync:
        assert sync._client.session.options is options


@pytest.mark.parametrize(
    "source, problem",
    [
        ({"proxy": "proxy.corp:3128"}, "source.proxy: give the proxy's URL"),
        ({"proxy": "socks5://proxy.corp:1080"}, "source.proxy: give the proxy's URL"),
        ({"transport": "httpcore"}, "source.transport: Input should be 'etl' or 'httpx'"),
    ],
)
def test_a_proxy_or_transport_etl_cannot_use_is_one_config_error_naming_the_key(source, problem):
    from etl.errors import ConfigError

    data = config_dict("https://host.example/sem-restservices", "out")
    data["source"].update(source)
    with pytest.raises(ConfigError, match=problem):
        parse_config(data)


def test_a_password_in_the_proxy_s_url_is_redacted_everywhere():
    from etl.support import redact

    data = config_dict("https://host.example/sem-restservices", "out")
    data["source"]["proxy"] = "http://me:cfg-Pr0xy-pw@proxy.corp:3128"
    parse_config(data)
    assert "cfg-Pr0xy-pw" not in redact.redact("proxy said: bad password cfg-Pr0xy-pw")
