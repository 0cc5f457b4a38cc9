"""Keep secrets (passwords, session cookies) out of every log line, message and file we write."""

from __future__ import annotations

import logging
import re
import threading

MASK = "***"
_lock = threading.Lock()
_secrets: set[str] = set()
# Also catch secrets we were never told about, in URLs and cookie headers.
_PATTERNS = [
    (re.compile(r"(password=)[^&\s'\"]*", re.IGNORECASE), r"\1" + MASK),
    (re.compile(r"((?:SEMSESSIONID|issToken)=)[^;&\s'\"]*"), r"\1" + MASK),
]


def register(*values: str | None) -> None:
    """Remember values that must never be shown (very short ones would mask too much)."""
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= 3)


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
