"""sink.catalog in the config: SQLite refused for Iceberg on an object store, the catalog URL's password
never shown (tests/e2e/test_iceberg_catalog.py runs a real PostgreSQL catalog)."""

from __future__ import annotations

import pytest

from etl.config import parse_config
from etl.errors import ConfigError
from etl.support import redact
from tests.support.configs import config_dict


@pytest.mark.parametrize("catalog", [None, "sqlite:////tmp/catalog.db"])
def test_sqlite_on_an_object_store_is_refused_in_one_line(catalog):
    data = config_dict("http://127.0.0.1:1/api", "s3://bucket/lake", sink={"format": "iceberg"})
    if catalog:
        data["sink"]["catalog"] = catalog
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert str(caught.value) == (
        "config error: sink: catalog: iceberg on an object store needs sink.catalog, a SQL database URL "
        "(postgresql://user:${PASSWORD}@host/db) or a REST catalog URI (https://...), not SQLite"
    )


def test_a_password_written_in_the_catalog_url_is_warned_about_and_never_shown(caplog):
    catalog = "postgresql://etl:hunter%2F2pw@db.example:5432/lake"
    data = config_dict(
        "http://127.0.0.1:1/api", "s3://bucket/lake", sink={"format": "iceberg", "catalog": catalog}
    )
    parse_config(data)
    assert "sink.catalog holds a password written in the config file" in caplog.text
    assert "hunter" not in caplog.text
    assert redact.redact(f"cannot open {catalog}") == "cannot open postgresql://etl:***@db.example:5432/lake"
    assert redact.redact("as typed: hunter/2pw") == "as typed: ***"
    # a URL never registered: its password is masked, a port and path are not taken for one
    assert redact.redact("mysql://u:p4ss@h/x http://h:8080/a@b") == "mysql://u:***@h/x http://h:8080/a@b"
