"""sink.format postgres in the config: the keys it needs and refuses, and the dsn's password registered
before validation, so no message shows it (tests/e2e/test_postgres.py runs a real PostgreSQL)."""

from __future__ import annotations

import pytest

from etl.config import parse_config
from etl.errors import ConfigError
from etl.storage.postgres import Database
from etl.support import redact
from tests.support.configs import config_dict


def sink(**keys: object) -> dict:
    return config_dict("http://127.0.0.1:1/api", "/tmp/out", sink={"format": "postgres", **keys})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (sink(), "dsn: sink.format postgres needs the database's URL"),
        (sink(dsn="mysql://h/db"), "dsn: give a PostgreSQL URL"),
        (sink(dsn="postgresql://h/db", schema="Bad-Name"), "sink.schema: a PostgreSQL schema name"),
        (
            config_dict("http://127.0.0.1:1/api", "/tmp/out", sink={"dsn": "postgresql://h/db"}),
            "only sink.format postgres has a database",
        ),
        (
            sink(dsn="postgresql://u:pw@h/db", password_file="/tmp/pw"),
            "password_file: the dsn holds a password already",
        ),
    ],
)
def test_what_a_postgres_sink_needs_is_named_in_one_line(data, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_dsns_password_is_never_shown_even_when_the_config_is_refused(caplog):
    data = sink(dsn="postgresql://etl:s3cr%2Fet-pg@db.example:5432/monitoring", schema="Bad")
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert "s3cr" not in str(caught.value) and "s3cr" not in caplog.text
    assert "sink.dsn holds a password written in the config file" in caplog.text
    assert redact.redact("libpq: s3cr/et-pg") == "libpq: ***"


def test_the_database_gets_the_password_percent_encoded_and_names_no_password():
    database = Database("postgresql://etl:pg-s3cr3t/Catalog:pw@127.0.0.1:5432/db?sslmode=require", "etl")
    assert database.uri == "postgresql://etl:pg-s3cr3t%2FCatalog%3Apw@127.0.0.1:5432/db?sslmode=require"
    assert database.display == "etl@127.0.0.1:5432/db" and database.target == "127.0.0.1:5432/db schema etl"
    from_file = Database("postgresql://etl@db:5432/x", "etl", password="p@ss word")
    assert from_file.uri == "postgresql://etl:p%40ss%20word@db:5432/x"
