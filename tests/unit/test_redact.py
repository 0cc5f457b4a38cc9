"""Secrets masked in every form they travel in."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus, urlencode

import pytest

from etl.support import redact


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
