"""Which proxy carries a request (etl/client/routes.py): source.proxy, or the environment's as every HTTP
client reads it, NO_PROXY excepted. Through a real proxy: tests/e2e/test_proxy.py."""

from __future__ import annotations

import pytest

from etl.client.routes import Proxies
from etl.errors import ConfigError
from etl.support import redact

PROXY_VARIABLES = [f"{s}_proxy" for s in ("http", "https", "all", "no")]


@pytest.fixture
def environ(monkeypatch):
    """No proxy variable of the machine's; the test sets its own."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)
    return monkeypatch


def test_no_proxy_anywhere_is_straight_to_the_server(environ):
    assert Proxies.of(None) == Proxies()
    assert Proxies.of(None).mounts({}) == {}


@pytest.mark.parametrize("case", [str.lower, str.upper], ids=["lower", "upper"])
def test_each_scheme_takes_its_variable_and_all_proxy_the_rest(environ, case):
    environ.setenv(case("https_proxy"), "http://secure:3128")
    environ.setenv(case("all_proxy"), "proxy.corp:8080")  # no scheme: an http proxy, as curl takes it
    environ.setenv(case("no_proxy"), "intranet.corp, .example.com,::1,10.1.2.3,localhost")
    proxies = Proxies.of(None)
    assert (proxies.http, proxies.https) == ("http://proxy.corp:8080", "http://secure:3128")
    assert proxies.bypass == (
        "all://*intranet.corp",
        "all://*example.com",  # a leading dot is ignored: the domain and its subdomains
        "all://[::1]",
        "all://10.1.2.3",
        "all://localhost",
    )


def test_lower_case_wins_over_upper_case(environ):
    environ.setenv("HTTP_PROXY", "http://upper:1")
    environ.setenv("http_proxy", "http://lower:2")
    assert Proxies.of(None).http == "http://lower:2"


def test_the_config_s_proxy_is_used_for_both_schemes_and_no_proxy_still_holds(environ):
    environ.setenv("HTTPS_PROXY", "http://from-the-environment:1")
    environ.setenv("NO_PROXY", "platform.test")
    proxies = Proxies.of("http://configured:3128")
    assert (proxies.http, proxies.https) == ("http://configured:3128", "http://configured:3128")
    assert proxies.mounts({"http://configured:3128": "P"}) == {  # type: ignore[dict-item]
        "http://": "P",
        "https://": "P",
        "all://*platform.test": None,  # the client's own transport: straight to the server
    }


def test_no_proxy_star_means_no_proxy_at_all(environ):
    environ.setenv("HTTPS_PROXY", "http://proxy:1")
    environ.setenv("NO_PROXY", "a.corp,*")
    assert Proxies.of("http://configured:2") == Proxies()


def test_a_proxy_s_password_is_redacted_and_a_scheme_etl_cannot_speak_is_one_line(environ):
    environ.setenv("HTTPS_PROXY", "http://user:pr0xy-Secret@proxy:3128")
    Proxies.of(None)
    assert "pr0xy-Secret" not in redact.redact("connecting via http://proxy:3128 as pr0xy-Secret")
    environ.setenv("HTTPS_PROXY", "socks5://user:s0cks-Secret@proxy:1080")
    with pytest.raises(ConfigError, match="http:// and https:// proxies only") as raised:
        Proxies.of(None)
    assert "s0cks-Secret" not in str(raised.value)


def test_the_transport_is_etl_s_or_httpx_s_and_proxied_schemes_go_to_httpx_s_proxy_transport(environ):
    import httpx

    from etl.client import ClientOptions
    from etl.client.answer_size import BoundedTransport
    from etl.client.routes import transports
    from etl.client.wire import WireTransport

    assert isinstance(transports(ClientOptions()).direct, WireTransport)
    direct = transports(ClientOptions(http_transport="httpx")).direct
    assert isinstance(direct, BoundedTransport) and isinstance(direct.inner, httpx.AsyncHTTPTransport)
    environ.setenv("NO_PROXY", "platform.test")
    carried = transports(ClientOptions(proxy="http://proxy:3128", max_answer_bytes=1000))
    assert isinstance(carried.direct, WireTransport)
    via = carried.mounts["https://"]
    assert isinstance(via, BoundedTransport) and via.via == "http://proxy:3128" and via.max_bytes == 1000
    assert carried.mounts["http://"] is via and carried.mounts["all://*platform.test"] is None
