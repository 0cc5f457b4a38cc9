"""The `lineage:` and `telemetry:` sections: their shorthands, their keys checked once and named, the
events' file read from the config's folder, their secrets masked; the parent run an orchestrator names;
the run id's UUID."""

from __future__ import annotations

import uuid

import pytest

from etl.config import load_config
from etl.errors import ConfigError
from etl.pipeline.observe import lineage_from_environment
from etl.pipeline.parent import ParentRun, parent, parent_run
from etl.support import redact

GOOD = (
    "source: {base_url: http://x/sem-restservices, username: demo, password: x}\n"
    "window: {start: 2026-11-01T00:00:00Z}\n"
    "sink: {path: out}\n"
)


def config(tmp_path, lineage: str):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD + f"lineage: {lineage}\n")
    return load_config(path)


def test_the_shorthands_and_the_default(tmp_path):
    assert config(tmp_path, "true").lineage.enabled is True
    assert config(tmp_path, "false").lineage.enabled is False
    (tmp_path / "c.yaml").write_text(GOOD)
    assert load_config(tmp_path / "c.yaml").lineage is None  # the environment decides


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{transport: {type: http}}", "lineage.transport: type http needs url, http(s)://host[:port]"),
        ("{transport: {type: file}}", "lineage.transport: type file needs path"),
        ("{transport: {type: kafka}}", "lineage.transport.type: Input should be 'http', 'file' or 'console'"),
        (
            "{transport: {type: file, path: x, url: http://y}}",
            "lineage.transport: url: not a key of type file",
        ),
        ("{namspace: x}", "lineage.namspace: unknown key (did you mean namespace?)"),
    ],
)
def test_a_wrong_key_is_named(tmp_path, section, message):
    with pytest.raises(ConfigError) as error:
        config(tmp_path, section)
    assert str(error.value) == f"config error: {message}"


def test_the_events_file_is_read_from_the_configs_folder(tmp_path):
    found = config(tmp_path, "{transport: {type: file, path: lineage/events.jsonl}}")
    assert found.lineage.transport.path == str(tmp_path / "lineage/events.jsonl")


def test_the_api_key_is_a_secret(tmp_path):
    found = config(tmp_path, "{transport: {type: http, url: 'http://marquez:5000', api_key: k3y-of-lineage}}")
    assert "k3y-of-lineage" not in repr(found)
    assert redact.redact("sent k3y-of-lineage") == "sent ***"


def test_the_parent_run_from_the_environment_or_the_caller(monkeypatch):
    run = str(uuid.uuid4())
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"air/flow/dag.task/{run}")
    monkeypatch.setenv("OPENLINEAGE_ROOT_PARENT_ID", f"air/flow/dag/{run}")
    found = parent()
    assert (found.namespace, found.name, found.run_id) == ("air/flow", "dag.task", run)
    assert found.root == ParentRun("air/flow", "dag", run)
    mine = ParentRun("dagster", "job", str(uuid.uuid4()))
    with parent_run(mine):
        assert parent() == mine
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", "not a parent")
    assert parent() is None


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OPENLINEAGE_URL": "http://m:5000"}, True),
        ({"OPENLINEAGE_CONFIG": "/etc/openlineage.yml"}, True),
        ({"OPENLINEAGE__TRANSPORT__TYPE": "console"}, True),
        ({"OPENLINEAGE_URL": "http://m:5000", "OPENLINEAGE_DISABLED": "true"}, False),
    ],
)
def test_the_environment_alone_turns_lineage_on(monkeypatch, env, on):
    for name in (
        "OPENLINEAGE_URL",
        "OPENLINEAGE_CONFIG",
        "OPENLINEAGE__TRANSPORT__TYPE",
        "OPENLINEAGE_DISABLED",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert lineage_from_environment() is on


def test_the_run_uuid_is_a_time_ordered_uuid7_of_etls_run_id():
    from etl.pipeline.lineage import run_uuid

    first = run_uuid("20261101T000000Z-001abc", "etl", "job")
    assert first == run_uuid("20261101T000000Z-001abc", "etl", "job")
    assert uuid.UUID(first).version == 7 and uuid.UUID(first).variant == uuid.RFC_4122
    assert int(first[:13].replace("-", ""), 16) == 1793491200001  # its first 48 bits: the run's start, in ms
    later = run_uuid("20261101T000001Z-000abc", "etl", "job")
    assert later > first and run_uuid("20261101T000000Z-001abc", "etl", "other") != first


def test_the_docs_example_is_a_valid_section(tmp_path, monkeypatch):
    from tests.support import ROOT

    page = (ROOT / "docs/orchestration.md").read_text()
    block = page.split("```yaml\nlineage:\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("OPENLINEAGE_API_KEY", "a-key-for-the-test")
    (tmp_path / "c.yaml").write_text(GOOD + "lineage:\n" + block)
    found = load_config(tmp_path / "c.yaml").lineage
    assert (found.namespace, found.job, found.transport.type) == ("plant", "etl.plant", "http")


def test_the_telemetry_section(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD + "telemetry: {otlp_endpoint: 'collector:4318'}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == (
        "config error: telemetry.otlp_endpoint: give the collector's URL, http(s)://host:port"
    )
    path.write_text(
        GOOD + "telemetry: {otlp_endpoint: 'http://c:4318/', headers: {Authorization: Bearer t0ken-otlp}}\n"
    )
    found = load_config(path).telemetry
    assert found.otlp_endpoint == "http://c:4318" and "t0ken-otlp" not in repr(found)
    assert redact.redact("sent Bearer t0ken-otlp") == "sent ***"


def test_the_docs_telemetry_example_is_a_valid_section(tmp_path, monkeypatch):
    from tests.support import ROOT

    page = (ROOT / "docs/orchestration.md").read_text()
    block = page.split("```yaml\ntelemetry:\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("OTLP_TOKEN", "a-token-for-the-test")
    (tmp_path / "c.yaml").write_text(GOOD + "telemetry:\n" + block)
    assert load_config(tmp_path / "c.yaml").telemetry.otlp_endpoint == "http://collector:4318"


def test_the_environment_alone_without_the_package_is_a_warning(tmp_path, monkeypatch, caplog):
    import sys

    from etl.pipeline.observe import observers

    (tmp_path / "c.yaml").write_text(GOOD)
    found = load_config(tmp_path / "c.yaml")
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "openlineage.client", None)
    monkeypatch.delitem(sys.modules, "etl.pipeline.lineage", raising=False)
    assert observers(found) == []
    assert "lineage needs openlineage-python: pip install 'etl[lineage]'" in caplog.text
