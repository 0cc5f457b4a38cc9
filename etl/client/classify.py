"""What an answer means: the body worth decoding, or the error it stands for."""

from __future__ import annotations

import email.utils
import math
import re
import time

import httpx

from etl.errors import InvalidResponse, NotFound, RequestRejected, ServerError
from etl.support import redact

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_HTML = re.compile(rb"\s*<")


def excerpt(response: httpx.Response, size: int = 120) -> str:
    text = response.content[:size].decode("utf-8", "replace")
    return redact.redact(" ".join(text.split()))


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
