"""Keep secrets (passwords, session cookies) out of every log line, message and file we write."""

from __future__ import annotations

import json
import logging
import re
import threading
from urllib.parse import quote, quote_plus, unquote

from etl.support.terminal import printable_lines

MASK = "***"
_lock = threading.Lock()
_secrets: set[str] = set()
_public: set[str] = set()  # words shown as they are though they contain a secret (a username)
# Also catch secrets we were never told about: in query strings, form bodies and JSON, in URLs and cookie
# headers.
_PATTERNS = [
    (re.compile(r"(password=)[^&\s'\"]*", re.IGNORECASE), r"\1" + MASK),
    (re.compile(r"""(["']password["']\s*:\s*["'])(?:[^"'\\]|\\.)*""", re.IGNORECASE), r"\1" + MASK),
    (re.compile(r"((?:SEMSESSIONID|issToken)=)[^;&\s'\"]*"), r"\1" + MASK),
    # user:password@ in a URL (a database or catalog URL); a '/' ends the match so host:port/path is kept
    (re.compile(r"(://[^:/@\s]*:)[^@\s/]+@"), r"\1" + MASK + "@"),
]
# The password of scheme://user:password@host... as SQLAlchemy parses it: anything up to the first '@'.
_URL_PASSWORD = re.compile(r"^[\w+.-]+://[^:/@]*:([^@]*)@")


def encodings(secret: str) -> set[str]:
    """The forms a secret travels in: as typed, percent-encoded (path or query style, `+` for spaces as
    forms send it, either case of hex digits) and escaped in JSON."""
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret), json.dumps(secret)[1:-1]}
    return forms | {re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), f) for f in forms}


def register(*values: str | None) -> None:
    """Remember values that must never be shown, in every form they travel in (very short ones would
    mask too much)."""
    with _lock:
        for value in values:
            if value and len(value) >= 3:
                _secrets.update(encodings(value))


def register_public(*values: str | None) -> None:
    """Remember words that are not secret though a secret may be part of them: a username ("demo1" with the
    password "demo") stays whole. One that equals a secret is still masked."""
    with _lock:
        _public.update(v for v in values if v)


def url_passwords(url: str) -> list[str]:
    """The password of a URL with credentials, as written and percent-decoded (empty: none)."""
    found = _URL_PASSWORD.match(url.strip())
    if not found or not found.group(1):
        return []
    return list(dict.fromkeys([found.group(1), unquote(found.group(1))]))


def redact(text: str) -> str:
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    words = [w for w in _public if w in text and any(s in w and s != w for s in _secrets)]
    if words:  # the public words stay; the text between them is redacted
        parts = re.split("(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + ")", text)
        return "".join(part if i % 2 else _mask(part) for i, part in enumerate(parts))
    return _mask(text)


def _mask(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


_installed = False


def install_log_redaction() -> None:
    """Redact every log record at creation, whichever logger (httpx, httpcore...) made it; and keep text
    the server sent from steering the terminal (control characters out)."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the caller's bug; leave it alone
            return record
        record.msg, record.args = printable_lines(redact(message)), None
        return record

    logging.setLogRecordFactory(factory)
