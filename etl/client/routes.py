"""Which transport carries a request: etl's own (`WireTransport`) or httpx's (`source.transport: httpx`)
straight to the server, or httpx's proxy transport through a forward proxy; every one within the answer
limit (`BoundedTransport` around httpx's).

The proxy is `source.proxy`, else the environment's as every HTTP client reads it (`HTTPS_PROXY`,
`HTTP_PROXY`, `ALL_PROXY`, lower case before upper case, as the standard library's `getproxies`), except
for the hosts `NO_PROXY` names (curl's rules: a name covers its subdomains, a leading dot is ignored,
`*` means no proxy at all). It is laid out as httpx's `mounts`, the routing httpx itself uses; httpx
reads the environment only when it is given no transport, so etl reads it here.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from etl.client.answer_size import BoundedTransport
from etl.client.options import ClientOptions
from etl.client.wire import WireTransport
from etl.errors import ConfigError
from etl.support import redact


@dataclass(frozen=True)
class Proxies:
    """The proxy of each scheme (None: straight to the server), and the hosts that bypass them as
    httpx mount patterns."""

    http: str | None = None
    https: str | None = None
    bypass: tuple[str, ...] = ()

    @classmethod
    def of(cls, proxy: str | None, environ: Mapping[str, str] | None = None) -> Proxies:
        """`proxy` (source.proxy) for both schemes, else the environment's (`environ`: the proxies as
        urllib's `getproxies_environment` reads them, {"http": url, "https": url, "all": url, "no": hosts});
        NO_PROXY either way. Passwords in the URLs are redacted from here on."""
        found = urllib.request.getproxies_environment() if environ is None else environ
        bypass: list[str] = []
        for host in (entry.strip() for entry in found.get("no", "").split(",")):
            if host == "*":
                return cls()
            if host:
                bypass.append(_pattern(host))
        http = proxy or found.get("http") or found.get("all")
        https = proxy or found.get("https") or found.get("all")
        urls = tuple(_url(u) if u else None for u in (http, https))
        for url in urls:
            if url:
                redact.register(*redact.url_passwords(url))
        return cls(urls[0], urls[1], tuple(bypass) if any(urls) else ())

    def mounts(
        self, proxied: Mapping[str, httpx.AsyncBaseTransport]
    ) -> dict[str, httpx.AsyncBaseTransport | None]:
        """httpx's `mounts`: a scheme's requests to the transport of its proxy (`proxied`: proxy URL ->
        transport), a bypassed host's to the client's own transport (None)."""
        mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
        for scheme, url in (("http", self.http), ("https", self.https)):
            if url:
                mounts[f"{scheme}://"] = proxied[url]
        mounts.update(dict.fromkeys(self.bypass))
        return mounts


def _url(url: str) -> str:
    """A proxy's URL with a scheme (a bare host:port is an http proxy, as curl takes it), and one etl can
    speak to."""
    url = url.strip() if "://" in url else f"http://{url.strip()}"
    if not url.lower().startswith(("http://", "https://")):
        raise ConfigError(
            f"proxy {redact.redact(url)}: etl speaks to http:// and https:// proxies only "
            "(source.proxy, HTTPS_PROXY, HTTP_PROXY, ALL_PROXY)"
        )
    return url


def _pattern(host: str) -> str:
    """A NO_PROXY entry as an httpx mount pattern: a name and its subdomains, an address, a URL."""
    if "://" in host:
        return host
    name = host.lstrip(".")
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return f"all://{name}" if name.lower() == "localhost" else f"all://*{name}"
    return f"all://[{address}]" if address.version == 6 else f"all://{address}"


@dataclass(frozen=True)
class Transports:
    """What carries a session's requests: `direct` to the server, and httpx's `mounts` for the proxied
    (and bypassed) ones."""

    direct: httpx.AsyncBaseTransport
    mounts: dict[str, httpx.AsyncBaseTransport | None]


def transports(options: ClientOptions) -> Transports:
    """The transports of `options` (its `http_transport`, `proxy`, TLS trust, limits and answer limit), the
    proxies of the environment with them."""
    proxies = Proxies.of(options.proxy)
    direct: httpx.AsyncBaseTransport
    if options.http_transport == "etl":
        direct = WireTransport(options.verify, options.limits, options.max_answer_bytes)
    else:
        direct = _httpx(options, None)
    proxied = {url: _httpx(options, url) for url in {proxies.http, proxies.https} if url}
    return Transports(direct, proxies.mounts(proxied))


def _httpx(options: ClientOptions, proxy: str | None) -> httpx.AsyncBaseTransport:
    """httpx's own transport (through `proxy`, if given) within the answer limit."""
    try:
        inner = httpx.AsyncHTTPTransport(verify=options.verify, limits=options.limits, proxy=proxy)
    except ValueError as exc:  # a proxy URL httpx cannot use
        raise ConfigError(f"proxy {redact.redact(proxy or '')}: {exc}") from None
    return BoundedTransport(inner, options.max_answer_bytes, via=proxy)
