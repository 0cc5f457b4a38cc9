"""What an answer means: the body worth decoding, or the error it stands for; and what a failed exchange
means, httpx's transport errors as etl's (where httpx maps httpcore's, `map_httpcore_exceptions`)."""

from __future__ import annotations

import email.utils
import math
import re
import ssl
import time

import httpx

from etl.errors import InvalidResponse, NetworkError, NotFound, RequestRejected, ServerError, TlsError
from etl.support import redact

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_HTML = re.compile(rb"\s*<")


def excerpt(response: httpx.Response, size: int = 120) -> str:
    """The start of an error answer's body on one line, its secrets masked (`redact.excerpt`)."""
    return redact.excerpt(response.content, size)


def retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asks to wait (a number or an HTTP date); None when it says nothing readable
    (`soon`, `inf`, NaN): the caller waits its default then. Capping is the retry policy's."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if parsed is None or parsed.tzinfo is None:
            return None
        seconds = parsed.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def is_html(body: bytes) -> bool:
    return _HTML.match(body) is not None


def raise_for_status(response: httpx.Response, what: str) -> None:
    """An error for any status but 2xx: retryable for RETRYABLE_STATUSES, final for the rest."""
    status = response.status_code
    if status < 300:
        return
    if status < 400:
        location = redact.redact(response.headers.get("location", ""))
        raise RequestRejected(f"{what}: unexpected redirect (HTTP {status} to {location!r})", status)
    if status in RETRYABLE_STATUSES:
        raise ServerError(f"{what}: HTTP {status} ({excerpt(response, 60)})", status, retry_after(response))
    if status == 404:
        raise NotFound(f"{what}: not found (HTTP 404)", 404, excerpt(response))
    raise RequestRejected(
        f"{what}: rejected with HTTP {status}: {excerpt(response)}", status, excerpt(response)
    )


def body_of(response: httpx.Response, method: str, path: str, expect_json: bool) -> bytes | None:
    """The body of an answer worth decoding (None: an empty one where that is fine). Answers meaning
    "not signed in" never come here: the auth flow has dealt with them."""
    if response.status_code >= 300:
        raise_for_status(response, f"{method} {path}")
    body = response.content
    if is_html(body):
        raise InvalidResponse(f"{method} {path}: answered an HTML page instead of JSON")
    if not body.strip():
        if expect_json:
            raise InvalidResponse(f"{method} {path}: empty answer")
        return None
    return body


# Handshakes that fail the same way every time: the peer does not speak TLS (an https:// URL to an http://
# server gets plain HTTP back) or no version both sides accept.
_PROTOCOL_MISMATCH = {
    "WRONG_VERSION_NUMBER",
    "RECORD_LAYER_FAILURE",
    "UNKNOWN_PROTOCOL",
    "PACKET_LENGTH_TOO_LONG",
    "HTTP_REQUEST",
    "UNSUPPORTED_PROTOCOL",
    "TLSV1_ALERT_PROTOCOL_VERSION",
    "NO_PROTOCOLS_AVAILABLE",
}


def transport_error(exc: httpx.TransportError, base_url: str) -> NetworkError:
    """The error a failed exchange with `base_url` stands for: a TlsError when trying again will not fix
    it (a certificate not verified, no TLS handshake), else a NetworkError, retried."""
    if isinstance(exc, httpx.TimeoutException):
        return NetworkError(f"timed out ({type(exc).__name__})", reason="timeout")
    if (tls := _tls_failure(exc, base_url)) is not None:
        return TlsError(tls)
    detail = redact.redact(str(exc))[:160] or type(exc).__name__
    return NetworkError(f"connection failed to {base_url}: {detail}", reason="connection")


def _tls_failure(exc: BaseException, base_url: str) -> str | None:
    """The message of a TLS failure that trying again will not fix, if that is what a connection error was."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            why = cause.verify_message or cause.reason or "certificate verify failed"
            return (
                f"TLS: cannot verify the server {base_url}: {why}; if it uses a private CA, "
                "set source.ca_bundle (etl init: --ca-bundle) to that CA's PEM file"
            )
        if isinstance(cause, ssl.SSLError) and cause.reason in _PROTOCOL_MISMATCH:
            plain = " (does it serve http://, not https://?)" if base_url.startswith("https://") else ""
            return f"TLS: no TLS handshake with {base_url}: {cause.reason}{plain}"
        cause = cause.__cause__ or cause.__context__
    return None
