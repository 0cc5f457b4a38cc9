"""How a client talks to the server, as one value: `ClientOptions`, made once from a config (`from_config`,
where the TLS trust is made from the CA bundle) or by hand, and handed from the client to its session and
transport."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx

from etl.client.auth import SignIn
from etl.client.concurrency import AUTO_START
from etl.client.retry import RetryPolicy
from etl.config import Config, SourceConfig
from etl.errors import ConfigError

log = logging.getLogger(__name__)
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
# Told of every request on the wire once its whole answer is in: the request, and the seconds since it
# was sent (a probe times the server with it).
AnswerHook = Callable[[httpx.Request, float], None]


@dataclass(frozen=True)
class ClientOptions:
    """Everything about how a client talks to the server but where (the base URL) and as whom.

    `sign_in`: the credentials go to /auth/login as the document's query parameters ("query") or as a
    form-encoded body ("form"). `timeout` bounds each connect and read, `request_timeout` a whole exchange
    (seconds; None: no bound); an answer over `max_answer_bytes` (on the wire or decompressed) is refused.
    `retry` is the policy after a failure, `max_in_flight` bounds the requests in flight: always that many
    may fly, or (`auto_concurrency`) a limit learned from the answers, from `start_in_flight` up to it
    (etl/client/concurrency.py); `max_rps` caps the requests a second (None: no cap). `verify` is the
    TLS trust (a context for a private CA); `on_answer`, when given, is told of every answer as it comes.
    `proxy`: the forward proxy of every request (None: the environment's, client/routes.py);
    `http_transport`: etl's own HTTP/1.1 transport or httpx's. `max_requests`: the requests the client
    may put on the wire in all, sign-ins and retries included (None: no bound); one more is not sent
    (`RequestsSpent`)."""

    sign_in: SignIn = "query"
    timeout: httpx.Timeout | float = 30.0
    request_timeout: float | None = 120.0
    max_answer_bytes: int = 32 * 1024**2
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_in_flight: int = 16
    auto_concurrency: bool = False
    start_in_flight: int = AUTO_START
    max_rps: float | None = None
    verify: bool | ssl.SSLContext = True
    on_answer: AnswerHook | None = None
    proxy: str | None = None
    http_transport: Literal["etl", "httpx"] = "etl"
    max_requests: int | None = None

    @classmethod
    def from_config(cls, config: Config) -> ClientOptions:
        """The options of a config's source: its timeouts, limits and sign-in, the retry policy, the
        extract's concurrency, and the TLS trust (`trust`)."""
        source = config.source
        return cls(
            sign_in=source.sign_in,
            timeout=httpx.Timeout(source.read_timeout, connect=source.connect_timeout),
            request_timeout=source.request_timeout,
            max_answer_bytes=int(source.max_answer_mb * 1024**2),
            retry=RetryPolicy(
                **config.retry.model_dump(exclude={"run_deadline"})
            ),  # a request's, not the run's
            max_in_flight=config.extract.most_in_flight,
            auto_concurrency=config.extract.concurrency == "auto",
            max_rps=config.extract.max_rps,
            verify=trust(source),
            proxy=source.proxy,
            http_transport=source.transport,
        )

    @property
    def limits(self) -> httpx.Limits:
        return httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=self.max_in_flight)


DEFAULT = ClientOptions()


def trust(source: SourceConfig) -> bool | ssl.SSLContext:
    """What the server's certificate is verified against: the system CAs, the ca_bundle, or (warned)
    nothing."""
    if (
        source.base_url.startswith("http://")
        and (urlsplit(source.base_url).hostname or "") not in LOCAL_HOSTS
    ):
        log.warning(
            "source.base_url is plain http: the password and session cookies cross the network "
            "unencrypted; use https"
        )
    if not source.verify_tls:
        log.warning("TLS certificate verification is OFF (source.verify_tls: false)")
        return False
    if source.ca_bundle is None:
        return True
    return ca_context(source.ca_bundle, "config error: source.ca_bundle")


def ca_context(bundle: Path, where: str) -> ssl.SSLContext:
    """A TLS context that trusts the CA certificates in `bundle` (PEM); a ConfigError that starts with
    `where` (the key or option that named the file) when they cannot be read."""
    try:
        return ssl.create_default_context(cafile=str(bundle))
    except FileNotFoundError:
        raise ConfigError(f"{where}: {bundle}: no such file") from None
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{where}: cannot load CA certificates from {bundle}: {reason}") from None
