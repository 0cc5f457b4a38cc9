"""Keep secrets (passwords, session cookies) out of every log line, message and file we write."""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import unquote

MASK = "***"
_lock = threading.Lock()
_secrets: set[str] = set()
# Also catch secrets we were never told about, in URLs and cookie headers.
_PATTERNS = [
    (re.compile(r"(password=)[^&\s'\"]*", re.IGNORECASE), r"\1" + MASK),
    (re.compile(r"((?:SEMSESSIONID|issToken)=)[^;&\s'\"]*"), r"\1" + MASK),
    # user:password@ in a URL (a database or catalog URL); a '/' ends the match so host:port/path is kept
    (re.compile(r"(://[^:/@\s]*:)[^@\s/]+@"), r"\1" + MASK + "@"),
]
# The password of scheme://user:password@host... as SQLAlchemy parses it: anything up to the first '@'.
_URL_PASSWORD = re.compile(r"^[\w+.-]+://[^:/@]*:([^@]*)@")


def register(*values: str | None) -> None:
    """Remember values that must never be shown (very short ones would mask too much)."""
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= 3)


def url_passwords(url: str) -> list[str]:
    """The password of a URL with credentials, as written and percent-decoded (empty: none)."""
    found = _URL_PASSWORD.match(url.strip())
    if not found or not found.group(1):
        return []
    return list(dict.fromkeys([found.group(1), unquote(found.group(1))]))


def redact(text: str) -> str:
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


_installed = False


def install_log_redaction() -> None:
    """Redact every log record at creation, whichever logger (httpx, httpcore...) made it."""
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
        record.msg, record.args = redact(message), None
        return record

    logging.setLogRecordFactory(factory)
