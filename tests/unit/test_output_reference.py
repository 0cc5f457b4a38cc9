"""docs/output.md is generated from the schemas (tools/output_reference.py): current, and with one meaning
for every column the code writes and none for a column it does not. What the data holds is checked against
the page's words in tests/e2e/test_output_meaning.py."""

from __future__ import annotations

from etl.dataset.query import DIMENSIONS
from etl.model import QUALITY_SCHEMA, SCHEMAS, ParamKind
from tools import output_reference as page


def test_the_page_is_what_the_schemas_generate():
    assert page.PAGE.read_text(encoding="utf-8") == page.render(), (
        "docs/output.md is out of date: make docs-output"
    )


def test_every_column_kind_folder_and_table_has_one_meaning_and_no_meaning_is_left_over():
    written = {field.name for schema in SCHEMAS.values() for field in schema}
    assert set(page.SERIES_COLUMNS) == written
    for name, meaning in page.SERIES_COLUMNS.items():
        if isinstance(meaning, dict):  # one per series: exactly those that have the column
            assert set(meaning) == {s for s, schema in SCHEMAS.items() if name in schema.names}, name
    assert list(page.QUALITY_COLUMNS) == QUALITY_SCHEMA.names
    assert list(page.KINDS) == list(ParamKind)
    assert list(page.FOLDERS) == page.partition_values()
    assert tuple(page.DIMENSIONS) == DIMENSIONS
