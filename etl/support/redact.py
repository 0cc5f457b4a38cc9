"""Keep secrets (passwords, session cookies) out of every log line, message and file we write.

A registered secret is found whatever a server did to it before sending it back. Text is compared
decoded: percent-encoding (of any subset of the characters, either case of hex digits, UTF-8 or
Latin-1), `+` for a space, JSON and JavaScript escapes (`\\uXXXX` of any character, `\\/`), HTML
character references (named, decimal, hex), each nested a few levels deep. Base64 (standard or URL-safe,
padded or not) is found by the part of its encoding that the secret alone decides, at each of the three
byte alignments, so a secret inside a larger blob (HTTP Basic's `user:password`) is found too; the
whole blob is masked then.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, unquote

from etl.errors import ConfigError
from etl.support.terminal import printable_lines

MASK = "***"
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

# One escaped character (or a run of percent-encoded bytes, or of \u escapes: a character may take
# several) in any of the encodings above; each alternative starts with its own character, which keeps the
# search fast. HTML names without their `;` are read only for the four that servers write so.
_ESCAPE = re.compile(
    r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*"
    r"|\\(?:u[0-9A-Fa-f]{4}(?:\\u[0-9A-Fa-f]{4})*|x[0-9A-Fa-f]{2}|[\"'\\/bfnrt])"
    r"|&(?:#[0-9]{1,8};?|#[xX][0-9A-Fa-f]{1,7};?|[A-Za-z][A-Za-z0-9]{0,31};|(?:amp|AMP|lt|LT|gt|GT|quot|QUOT)\b)"
)
_SHORT = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_INTRODUCERS = ("%", "\\", "&")
_DEPTH = 3  # levels of escaping undone (a JSON string of an HTML page of a percent-encoded query)
# Percent-encoded bytes that are not UTF-8 are read as Latin-1 (surrogateescape keeps them as U+DC80...).
_LATIN1 = {0xDC00 + b: chr(b) for b in range(0x80, 0x100)}
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_FIRST = (0, 2, 3)  # the first base64 digit the secret alone decides, after 0, 1 or 2 bytes of other data
_LAST = (0, 1, 2)  # digits it decides of a last group of 3 bytes holding 0, 1 or 2 of its bytes
_GRAM = 4  # characters of a string that _Strings indexes it by


class _Strings:
    """Strings to look for in a text: each in turn while they are no more than the text's characters, else
    through an index of their first characters (a set lookup per character of the text, however many
    strings: each sign-in adds its session cookies)."""

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self.all = tuple(sorted(set(strings), key=len, reverse=True))
        self.short = tuple(s for s in self.all if len(s) < _GRAM)
        by_start: dict[str, list[str]] = {}
        for s in self.all:
            if len(s) >= _GRAM:
                by_start.setdefault(s[:_GRAM], []).append(s)
        self.by_start = {start: tuple(group) for start, group in by_start.items()}

    def any_in(self, text: str) -> bool:
        if len(self.all) <= len(text):
            return any(s in text for s in self.all)
        grams = (text[i : i + _GRAM] for i in range(len(text) - _GRAM + 1))
        return any(s in text for s in self.short) or not self.by_start.keys().isdisjoint(grams)

    def candidates(self, text: str) -> tuple[str, ...]:
        """Those that may be in the text (all those that are)."""
        if len(self.all) <= len(text):
            return self.all
        grams = {text[i : i + _GRAM] for i in range(len(text) - _GRAM + 1)}
        return self.short + tuple(s for start in self.by_start.keys() & grams for s in self.by_start[start])


@dataclass(frozen=True)
class _Index:
    """What redact() looks for, made anew on each change and replaced whole (read without the lock)."""

    raw: _Strings = _Strings()  # the secrets as registered, found in the text as it is
    needles: _Strings = _Strings()  # their decoded and folded forms, found in the decoded text
    base64: frozenset[str] = frozenset()  # the needles that are base64 of a secret
    shields: tuple[str, ...] = ()  # the public words that contain a secret


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: set[str] = set()
        self.public: set[str] = set()  # words shown as they are though they contain a secret (a username)
        self.index = _Index()

    def add(self, secrets: Iterable[str], public: Iterable[str]) -> None:
        with self.lock:
            added = [v for v in secrets if v not in self.secrets]
            shown = [v for v in public if v not in self.public]
            if not added and not shown:
                return
            self.secrets.update(added)
            self.public.update(shown)
            old = self.index
            decoded, cores = set(old.needles.all) - old.base64, set(old.base64)
            for secret in added:
                decoded.add(_fold(_decoded(secret)))
                # Latin-1 bytes that are UTF-8 too are read as UTF-8 (C2 A9 is "©", not "Â©")
                with contextlib.suppress(UnicodeEncodeError):
                    decoded.add(_fold(_decoded(quote(secret, safe="", encoding="latin-1"))))
                for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
                    cores |= _base64_cores(form.encode("utf-8", "surrogatepass"))
            shields = (w for w in self.public if any(s in w and s != w for s in self.secrets))
            self.index = _Index(
                raw=_Strings(self.secrets),
                needles=_Strings(decoded | cores),
                base64=frozenset(cores - decoded),
                shields=tuple(sorted(shields, key=len, reverse=True)),
            )


_registry = _Registry()


def register(*values: str | None) -> None:
    """Remember values that must never be shown, in whatever form they travel (very short ones would
    mask too much)."""
    _registry.add([v for v in values if v and len(v) >= 3], ())


def register_public(*values: str | None) -> None:
    """Remember words that are not secret though a secret may be part of them: a username ("demo1" with the
    password "demo") stays whole. One that equals a secret is still masked."""
    _registry.add((), [v for v in values if v])


def read_secret(path: Path, key: str) -> str:
    """A password file's secret (its text, stripped), registered; unreadable: a ConfigError naming `key`."""
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"config error: {key}: cannot read {path}: {exc.strerror}") from None
    register(secret)
    return secret


def url_passwords(url: str) -> list[str]:
    """The password of a URL with credentials, as written and percent-decoded (empty: none)."""
    found = _URL_PASSWORD.match(url.strip())
    if not found or not found.group(1):
        return []
    return list(dict.fromkeys([found.group(1), unquote(found.group(1))]))


def redact(text: str) -> str:
    """The text with every registered secret, in any of its forms, and every named password masked."""
    index = _registry.index
    if index.raw.all:
        decoded = _decoded(text)
        compared = _fold(decoded)
        # A secret as it is in a text that decoding left alone is in `compared` too.
        if index.needles.any_in(compared) or (decoded is not text and index.raw.any_in(text)):
            text = _masked(text, index)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _decode(match: re.Match[str]) -> str:
    """The character(s) one escape stands for."""
    value = match.group()
    if value[0] == "%":
        return bytes.fromhex(value.replace("%", "")).decode("utf-8", "surrogateescape").translate(_LATIN1)
    if value[0] == "&":  # a number as it is, where html.unescape would drop or replace some as browsers do
        if value[1] != "#":
            return html.unescape(value)
        number = int(value[3:].rstrip(";"), 16) if value[2] in "xX" else int(value[2:].rstrip(";"))
        return chr(number) if number <= 0x10FFFF else "\ufffd"
    if value[1] == "u":
        return str(json.loads(f'"{value}"'))
    if value[1] == "x":
        return chr(int(value[2:], 16))
    return _SHORT[value[1]]


def _decoded(text: str) -> str:
    """The text with its escapes decoded, as far as _DEPTH levels (the same object when it has none)."""
    for _ in range(_DEPTH):
        if not any(c in text for c in _INTRODUCERS):
            break
        decoded = _ESCAPE.sub(_decode, text)
        if decoded == text:
            break
        text = decoded
    return text


def _fold(text: str) -> str:
    """Decoded text as it is compared: a space is a `+` (a form's `+` is a space), and base64's URL-safe
    digits are the standard ones."""
    return text.replace(" ", "+").replace("-", "+").replace("_", "/")


def _located(text: str) -> tuple[str, list[int], list[int]]:
    """The text decoded as _decoded decodes it, and where each of its characters came from: the start
    and the end of the escape (or the character) in `text` that it was decoded from."""
    starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
    for _ in range(_DEPTH):
        pieces: list[str] = []
        new_starts: list[int] = []
        new_ends: list[int] = []
        last, changed = 0, False
        for match in _ESCAPE.finditer(text):
            i, j = match.span()
            decoded = _decode(match)
            changed = changed or decoded != match.group()
            pieces += (text[last:i], decoded)
            new_starts += starts[last:i] + [starts[i]] * len(decoded)
            new_ends += ends[last:i] + [ends[j - 1]] * len(decoded)
            last = j
        if not changed:
            break
        pieces.append(text[last:])
        text, starts, ends = "".join(pieces), new_starts + starts[last:], new_ends + ends[last:]
    return text, starts, ends


def _masked(text: str, index: _Index) -> str:
    """The text with each span that holds a secret, in any form, masked (but within a public word)."""
    spans = [(i, i + len(s)) for s in index.raw.candidates(text) for i in _occurrences(text, s)]
    decoded, starts, ends = _located(text)
    compared = _fold(decoded)
    for needle in index.needles.candidates(compared):
        for i in _occurrences(compared, needle):
            j = i + len(needle)
            if needle in index.base64:  # the whole blob: the digits around the core hold bits of it too
                while i > 0 and decoded[i - 1] in _BASE64:
                    i -= 1
                while j < len(decoded) and (decoded[j] in _BASE64 or decoded[j] == "="):
                    j += 1
            spans.append((starts[i], ends[j - 1]))
    shields = [(i, i + len(w)) for w in index.shields for i in _occurrences(text, w)]
    spans = [(a, b) for a, b in spans if not any(s <= a and b <= e for s, e in shields)]
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    pieces: list[str] = []
    last = 0
    for a, b in merged:
        pieces += (text[last:a], MASK)
        last = b
    return "".join(pieces) + text[last:]


def _occurrences(text: str, needle: str) -> list[int]:
    found: list[int] = []
    i = text.find(needle)
    while i >= 0:
        found.append(i)
        i = text.find(needle, i + 1)
    return found


def _base64_cores(data: bytes) -> set[str]:
    """The base64 digits that `data` alone decides wherever it sits in a larger blob, for each of the
    three alignments of its first byte."""
    cores: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode()
        total = shift + len(data)
        core = encoded[_FIRST[shift] : 4 * (total // 3) + _LAST[total % 3]]
        cores.add(core)
    return cores


_installed = False


def install_log_redaction() -> None:
    """Redact every log record at creation, whichever logger (httpx, httpcore...) made it; and keep text
    the server sent from steering the terminal (control characters out)."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the caller's bug; leave it alone
            return record
        record.msg, record.args = printable_lines(redact(message)), None
        return record

    logging.setLogRecordFactory(factory)


def excerpt(text: bytes | str, size: int) -> str:
    """The start of a text a server sent, on one line, at most `size` characters: its secrets masked
    before it is cut (a secret cut in two is found no more) and before its white space is joined (a
    secret may hold some)."""
    head = text[: size * 32]
    masked = redact(head if isinstance(head, str) else head.decode("utf-8", "replace"))
    return " ".join(masked.split())[:size]
