"""Text from the server made safe to print, and secrets masked in every form they travel in."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus, urlencode

import pytest

from etl.support import redact
from etl.support.terminal import json_for_terminal, printable, printable_lines

STEERING = "a\x1b[2Jb\x1b]0;title\x07c\x1b]8;;https://x\x07d\re\u202ef\u2066g\x9bh\x7fi\tj\nk"


def test_printable_strips_control_and_bidi_characters_keeping_the_text():
    assert printable(STEERING) == "a[2Jb]0;titlec]8;;https://xd efghi j k"
    assert printable_lines("one\x1b\ntwo\r") == "one\ntwo "
    assert printable("obj-1 Цех №2 ✓") == "obj-1 Цех №2 ✓"  # other text is left alone


def test_json_for_terminal_escapes_what_json_writers_leave_raw():
    text = json.dumps({"name": "a\x9bb\u202ec\x7f"}, ensure_ascii=False)
    safe = json_for_terminal(text)
    assert not any(c in safe for c in "\x9b\u202e\x7f")
    assert json.loads(safe) == {"name": "a\x9bb\u202ec\x7f"}  # the same document


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
