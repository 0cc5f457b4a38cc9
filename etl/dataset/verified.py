"""The records `etl verify` keeps beside the output, one per verify (`_verify/{verify_id}.json`, names
sorting as they started), which `etl report` and `etl doctor` read."""

from __future__ import annotations

from typing import Any

import orjson

from etl.sinks.output import Output

FOLDER = "_verify"


def save(output: Output, record: dict[str, Any]) -> None:
    output.data.write_atomic(
        f"{FOLDER}/{record['verify_id']}.json", orjson.dumps(record, option=orjson.OPT_INDENT_2)
    )


def last(output: Output, source: str) -> dict[str, Any] | None:
    """The newest record of this source (None: no verify yet, or none readable)."""
    storage = output.data
    names = sorted((n for n in storage.listdir(FOLDER) if n.endswith(".json")), reverse=True)
    for name in names:
        body = storage.read(f"{FOLDER}/{name}")
        try:
            record = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("source") == source:
            return record
    return None
