"""docs/config.md is generated from the config's models (tools/config_reference.py): it says every key, and
it is regenerated whenever a model changes (`make docs-config`)."""

from __future__ import annotations

from etl.config import Config, _keys
from tools.config_reference import PAGE, render, sections


def test_the_page_is_what_the_models_generate():
    assert PAGE.read_text(encoding="utf-8") == render(), "docs/config.md is out of date: run make docs-config"


def test_every_key_has_a_row_with_a_type_a_default_and_a_description():
    page = render()
    sections_only = {prefix.rstrip(".") for prefix, _ in sections(Config) if prefix}
    for key in _keys(Config):
        if key in sections_only:
            continue
        (row,) = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
        _, type_, default, description = (cell.strip() for cell in row.strip("|").split(" | "))
        assert type_ and default and description, row


def test_the_hand_written_minimal_config_of_the_operations_page_is_valid(monkeypatch, tmp_path):
    """docs/operations.md, "When etl init cannot finish": the config a user copies must load as written."""
    from etl.config import load_config

    page = (PAGE.parent / "operations.md").read_text(encoding="utf-8")
    section = page.split("## When `etl init` cannot finish", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("ETL_PASSWORD", "secret")
    (tmp_path / "site.yaml").write_text(block, encoding="utf-8")
    config = load_config(tmp_path / "site.yaml")
    assert config.source.username == "exporter" and config.window.end == "now"
