"""Secrets masked in every form they travel in: percent-encoded (wholly or in part), base64 (alone, inside
a larger blob, as HTTP Basic), JSON and HTML escapes, one inside another; and text without a secret left
as it is."""

from __future__ import annotations

import base64
import html
import json
import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from html.entities import codepoint2name
from urllib.parse import quote, quote_plus, urlencode

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from etl.client.classify import excerpt
from etl.support import redact

MASK = redact.MASK


@contextmanager
def only(*secrets: str, public: tuple[str, ...] = ()) -> Iterator[None]:
    """Redaction that knows these secrets and public words alone (the process's others are put back after)."""
    saved = redact._registry
    redact._registry = redact._Registry()
    try:
        redact.register(*secrets)
        redact.register_public(*public)
        yield
    finally:
        redact._registry = saved


def _percent(c: str, rng: random.Random) -> str:
    return "".join(f"%{b:02X}" if rng.random() < 0.5 else f"%{b:02x}" for b in c.encode())


def _unicode(c: str, rng: random.Random) -> str:
    escaped = json.dumps(c)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04x}"
    return escaped.upper().replace("\\U", "\\u") if rng.random() < 0.5 else escaped


def _entity(c: str, rng: random.Random) -> str:
    choices = [f"&#{ord(c)};", f"&#x{ord(c):x};", f"&#X{ord(c):04X};"]
    if ord(c) in codepoint2name:
        choices.append(f"&{codepoint2name[ord(c)]};")
    return rng.choice(choices)


def _some(
    escape: Callable[[str, random.Random], str], plain: Callable[[str], str] = str
) -> Callable[[str, random.Random], str]:
    """Each character escaped or not, at random (`plain`: what the format needs of those that are not)."""
    return lambda p, rng: "".join(escape(c, rng) if rng.random() < 0.5 else plain(c) for c in p)


def _json(c: str) -> str:
    return json.dumps(c, ensure_ascii=False)[1:-1]


def _b64(data: bytes, rng: random.Random) -> str:
    encoded = base64.b64encode(data) if rng.random() < 0.5 else base64.urlsafe_b64encode(data)
    return (encoded if rng.random() < 0.5 else encoded.rstrip(b"=")).decode()


def _go_json(p: str) -> str:
    return json.dumps(p)[1:-1].replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# How a server may echo a password: each takes the password and a seeded random for its choices.
ENCODINGS: dict[str, Callable[[str, random.Random], str]] = {
    "raw": lambda p, rng: p,
    "percent": lambda p, rng: quote(p, safe=""),
    "percent, lower hex": lambda p, rng: re.sub("%..", lambda m: m.group().lower(), quote(p, safe="")),
    "path style": lambda p, rng: quote(p),
    "form style": lambda p, rng: quote_plus(p),
    "form field": lambda p, rng: urlencode({"password": p}).split("=", 1)[1],
    "percent, some characters": _some(_percent),
    "percent, only the space": lambda p, rng: p.replace(" ", "%20"),
    "json": lambda p, rng: _json(p),
    "json, ascii": lambda p, rng: json.dumps(p)[1:-1],
    "json, go style": lambda p, rng: _go_json(p),
    "json, slash escaped": lambda p, rng: json.dumps(p)[1:-1].replace("/", "\\/"),
    "json, some characters \\u": _some(_unicode, _json),
    "json, every character \\u": lambda p, rng: "".join(_unicode(c, rng) for c in p),
    "html": lambda p, rng: html.escape(p),
    "html, some characters": _some(_entity, html.escape),
    "html, every character": lambda p, rng: "".join(_entity(c, rng) for c in p),
    "html twice": lambda p, rng: html.escape(html.escape(p)),
    "html of go json": lambda p, rng: html.escape(_go_json(p)),
    "percent of json": lambda p, rng: quote(json.dumps(p)[1:-1], safe=""),
    "json of percent, some": lambda p, rng: json.dumps(_some(_percent)(p, rng))[1:-1],
    "base64": lambda p, rng: _b64(p.encode(), rng),
    "base64 of the form field": lambda p, rng: _b64(quote_plus(p).encode(), rng),
    "http basic": lambda p, rng: "Basic " + _b64(f"user{'x' * rng.randrange(3)}:{p}".encode(), rng),
    "base64, inside a blob": lambda p, rng: _b64(
        rng.randbytes(rng.randrange(9)) + p.encode() + rng.randbytes(rng.randrange(9)), rng
    ),
    "base64 in json, slash escaped": lambda p, rng: _b64(p.encode(), rng).replace("/", "\\/"),
    "base64, percent-encoded": lambda p, rng: quote(_b64(p.encode(), rng), safe=""),
}
# Any character but lone surrogates, and a password that does not start or end with a space (a mask would
# take the space around it too: "error:***end").
CHARACTERS = st.characters(exclude_categories=("Cs",))
PASSWORDS = st.text(CHARACTERS, min_size=4, max_size=24).filter(lambda p: p.strip(" +-_\t\n\r\x0b\x0c") == p)


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(password=PASSWORDS, rng=st.randoms(use_true_random=False))
def test_no_form_of_a_registered_password_survives(encoding, password, rng):
    form = ENCODINGS[encoding](password, rng)
    assume(password not in "error: ... end")
    with only(password):
        redacted = redact.redact(f"error: {form} end")
    expected = "error: Basic *** end" if form.startswith("Basic ") else f"error: {MASK} end"
    assert redacted == expected, (form, redacted)


@given(password=st.text(st.characters(max_codepoint=0xFF), min_size=4, max_size=24))
def test_a_password_percent_encoded_in_latin_1_is_masked(password):
    """Latin-1 bytes that happen to be UTF-8 too (C2 A9) are found either way."""
    form = quote(password, safe="", encoding="latin-1")
    assume(password not in "error: () end")  # a password that is a word of the message is masked there too
    with only(password):
        assert redact.redact(f"error: ({form}) end") == f"error: ({MASK}) end"


@given(
    password=st.sampled_from(["p@ss w&rd=1", 'q"uo\\te é', "Sup3r$ecret&pa ss%w=rd", "пароль 🔑 <&>"]),
    prefix=st.binary(max_size=5),
    suffix=st.binary(max_size=5),
)
def test_base64_finds_a_password_at_any_offset_in_a_blob(password, prefix, suffix):
    """A blob holding the password at byte 0, 1 or 2 of a 3-byte group (mod 3) is masked whole."""
    blob = base64.b64encode(prefix + password.encode() + suffix).decode()
    with only(password):
        assert redact.redact(f"Authorization: Basic {blob}, again {blob.rstrip('=')}.") == (
            f"Authorization: Basic {MASK}, again {MASK}."
        )


LINES = [
    "HTTP Request: GET http://127.0.0.1:8765/sem-restservices/db/measure/1001/2026-11-01T00%3A00%3A00.000Z/"
    '2026-11-02T00%3A00%3A00.000Z?count=10000&offset=0 "HTTP/1.1 200 OK"',
    "etl.client.wire: connected to 127.0.0.1:8765 (reused 0, open 4)",
    'raw 1001 2026-11-01: HTTP 503 ({"error": "server_error", "message": "injected \\u0026 \\/x"})',
    "<html><body><h1>400 Bad Request</h1><p>bad &amp; worse &#38; &lt;b&gt; &#x26;</p></body></html>",
    "Basic ZXRsLXVzZXI6YW5vdGhlciBvbmU= and eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ",
    "etl: run 20261101T000000Z-abcdef ok: 48 windows, 123456 points, C:\\new\\table, 50% & 12%",
]
# A password that cannot be any of these lines' text: it holds a character none of them can decode to.
FOREIGN = st.tuples(
    st.text(CHARACTERS, min_size=3, max_size=12),
    st.characters(min_codepoint=0x100, exclude_categories=("Cs",)),
    st.text(CHARACTERS, max_size=12),
).map("".join)


@given(password=FOREIGN, line=st.sampled_from(LINES))
def test_lines_without_the_password_are_left_alone(password, line):
    with only(password, public=("etl-user",)):
        assert redact.redact(line) == line


@given(password=FOREIGN, text=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200))
def test_random_text_without_the_password_is_left_alone(password, text):
    assume(
        "password" not in text.lower() and "://" not in text and "Token=" not in text and "ID=" not in text
    )
    with only(password):
        assert redact.redact(text) == text


def test_many_secrets_are_found_as_surely_as_few():
    """Past as many secrets as a text has characters (a run that signed in hundreds of times), they are
    looked for through an index: the same ones are found, and text without them is left alone."""
    cookies = [f"{n:04d}" + "c00k1e-v4lue_" + "x" * (n % 7) for n in range(300)]
    password = "Sup3r$ecret&pa ss%w=rd"
    with only(password, *cookies, "q7z"):
        for line in LINES:
            assert redact.redact(line) == line
        for form in (password, quote_plus(password), _go_json(password), html.escape(password), cookies[-1]):
            assert redact.redact(f"error: {form} end") == f"error: {MASK} end", form
        blob = base64.b64encode(f"user:{password}".encode()).decode()
        assert (
            redact.redact(f"Basic {blob}; SEMSESSIONID={cookies[7]}; x q7z")
            == f"Basic {MASK}; SEMSESSIONID={MASK}; x {MASK}"
        )


def test_a_public_word_holding_the_password_stays_whole_and_the_password_is_masked_around_it():
    with only("demo", public=("demo1",)):
        assert redact.redact("user 'demo1' signed in with demo") == f"user 'demo1' signed in with {MASK}"
        assert redact.redact("demo1 as %64emo and ZGVtbzE6ZGVtbw==") == f"demo1 as {MASK} and {MASK}"
    with only("demo1", public=("demo1",)):  # a public word that is the secret is masked
        assert redact.redact("user demo1") == f"user {MASK}"


def test_a_named_password_is_masked_whole_when_it_is_a_registered_one():
    """The patterns come after the registered secrets: `password=` stops at `&`, the password does not."""
    with only("Sup3r$ecret&pa ss%w=rd"):
        assert redact.redact("password=Sup3r$ecret&pa ss%w=rd&user=x") == f"password={MASK}&user=x"


def test_an_excerpt_of_an_error_body_is_redacted_before_it_is_cut():
    """A password that the excerpt's end would cut in two leaves no part of it."""
    password = "Sup3r$ecret&pa ss%w=rd"
    with only(password):
        for at in range(100, 125):
            body = ("x" * at + quote_plus(password) + " and more").encode()
            shown = excerpt(httpx.Response(500, content=body))
            assert "Sup3r" not in shown and "%24ecr" not in shown and len(shown) <= 120, shown


@pytest.mark.parametrize("password", ["p@ss w&rd=1", 'q"uo\\te é'])
def test_a_registered_password_is_masked_in_every_encoding(password):
    redact.register(password)
    forms = [
        password,
        quote(password, safe=""),
        quote(password),
        quote_plus(password),
        quote(password, safe="").lower(),
        urlencode({"password": password}).split("=", 1)[1],
        json.dumps(password)[1:-1],
    ]
    for form in forms:
        assert form not in redact.redact(f"error: {{'x': '{form}'}} and {form}"), form


def test_passwords_never_registered_are_masked_where_they_are_named():
    assert redact.redact('{"params": {"password": "p%40ss+w%26rd"}}') == '{"params": {"password": "***"}}'
    assert redact.redact("password=abc&user=me") == "password=***&user=me"
    assert "s3cret" not in redact.redact("connection failed to https://user:s3cret@host.example/api")
