"""Each OpenLineage event checked against the spec's JSON schema and each facet against its own
(tests/support/openlineage/, copied from OpenLineage; etl's own facet from docs/lineage/). The lineage
server the events are sent to: tests/support/receiver.py."""

from __future__ import annotations

import json
import re
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from tests.support import ROOT

SCHEMAS = Path(__file__).parent / "openlineage"
SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json"


@cache
def _registry() -> Registry:
    documents = [json.loads(p.read_text()) for p in SCHEMAS.rglob("*.json")]
    documents.append(json.loads((ROOT / "docs/lineage/EtlRunFacet.json").read_text()))
    return Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in documents)


def _schema_of(url: str) -> str:
    """The schema a facet names, or the copy of the same facet's other patch version (OpenLineage's
    versioning: a patch only adds optional fields, so an event valid for one is valid for the other)."""
    document, _, pointer = url.partition("#")
    registry = _registry()
    if document not in registry:
        found = re.fullmatch(r"(.*/)(\d+-\d+-)\d+(/[^/]+)", document)
        assert found, f"no schema for {url} in {SCHEMAS}"
        same = [
            u
            for u in registry
            if re.fullmatch(re.escape(found[1] + found[2]) + r"\d+" + re.escape(found[3]), u)
        ]
        assert same, f"no schema for {url} in {SCHEMAS}"
        document = same[0]
    return f"{document}#{pointer}"


def check(event: dict[str, Any]) -> None:
    """The event is a valid RunEvent of the spec, every facet valid for the schema it names, and its run
    ids UUIDs (AssertionError saying what is wrong)."""
    _validate(event, f"{SPEC}#/$defs/RunEvent")
    uuid.UUID(event["run"]["runId"])
    facets = [*event["run"].get("facets", {}).items(), *event["job"].get("facets", {}).items()]
    for dataset in [*event.get("inputs", []), *event.get("outputs", [])]:
        for group in ("facets", "inputFacets", "outputFacets"):
            facets += dataset.get(group, {}).items()
    for name, facet in facets:
        _validate(facet, _schema_of(facet["_schemaURL"]), name)


def _validate(instance: Any, ref: str, what: str = "the event") -> None:
    validator = Draft202012Validator(
        {"$ref": ref}, registry=_registry(), format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]
    assert not errors, f"{what} is not valid for {ref}: {errors}"
