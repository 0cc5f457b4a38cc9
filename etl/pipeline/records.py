"""Platform records (JSON objects) as Arrow columns analysts can use: snake_case names, typed values.

`objectId` becomes `object_id`, at every level; numbers, text and booleans keep their types, a list of
strings is a list of strings, a nested record is a struct (DuckDB: `o.sdirobjectstate.objstatename`).
Only values that disagree (a number here, a record there) become JSON text, which DuckDB's json
functions read. CSV has no nested types: there lists and records are written as JSON text.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any, cast

import orjson
import pyarrow as pa

log = logging.getLogger(__name__)
_WORD_BREAKS = (re.compile(r"([A-Z]+)([A-Z][a-z])"), re.compile(r"([a-z0-9])([A-Z])"))


@functools.lru_cache(maxsize=4096)  # a listing repeats a few dozen key names over every record
def snake(name: str) -> str:
    """objectId -> object_id, deviceClassifierId -> device_classifier_id, HTTPStatus -> http_status."""
    for pattern in _WORD_BREAKS:
        name = pattern.sub(r"\1_\2", name)
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or "field"


# Records nest a few levels; deeper than this a value is written as null (Arrow, Parquet and JSON text
# all have limits of their own, and a record that hit them would fail its whole table).
MAX_DEPTH = 32


def snake_keys(value: Any, depth: int = 0) -> Any:
    """A record with snake_case keys at every level. Where two keys meet (a derived `object_id` beside
    the platform's `objectId`), the first value that is not null stays. Values nested deeper than
    MAX_DEPTH are null (and logged)."""
    if depth > MAX_DEPTH and isinstance(value, dict | list):
        log.warning("a record nests deeper than %d levels: the deeper part is written as null", MAX_DEPTH)
        return None
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = snake(str(key))
            if out.get(name) is None:
                out[name] = snake_keys(item, depth + 1)
        return out
    if isinstance(value, list):
        return [snake_keys(v, depth + 1) for v in value]
    return value


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits, which orjson refuses: the stdlib writes any
        return json.dumps(value)


def json_text(values: list[Any]) -> pa.Array:
    return pa.array([None if v is None else _dumps(v) for v in values], pa.string())


def writable(kind: pa.DataType) -> bool:
    """Can Parquet hold this type? Not a struct without fields, at any depth."""
    if pa.types.is_struct(kind):
        return kind.num_fields > 0 and all(writable(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return writable(kind.value_type)
    return True


def nested(kind: pa.DataType) -> bool:
    return cast(bool, pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind))


def column(values: list[Any]) -> pa.Array:
    """Typed values; JSON text when they disagree."""
    present = {type(v) for v in values if v is not None}
    if present <= {int, float} and float in present:
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    try:
        array = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return json_text(values)
    return array if writable(array.type) else json_text(values)


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    records = [snake_keys(r) for r in records]
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r))
    return pa.table({n: column([r.get(n) for r in records]) for n in names}) if records else pa.table({})


def unify(name: str, kinds: set[pa.DataType]) -> pa.DataType:
    """One type for a column whose pages disagree: nulls take the others' type, integers widen to floats,
    records take every field of each; JSON text when nothing fits."""
    kinds = kinds - {pa.null()}
    if not kinds:
        return pa.null()
    if len(kinds) == 1:
        return kinds.pop()
    try:
        merged = pa.unify_schemas(
            [pa.schema([pa.field(name, k)]) for k in kinds], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.string()
    kind = merged.field(name).type
    return kind if writable(kind) else pa.string()


def conform(array: pa.ChunkedArray | pa.Array, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A page's column as the file's type: cast, or JSON text where the file's column is text and the
    page's is not."""
    if array.type == kind:
        return array
    if pa.types.is_string(kind) and not pa.types.is_string(array.type) and array.type != pa.null():
        return json_text(array.to_pylist())
    return array.cast(kind)


def flat(table: pa.Table) -> pa.Table:
    """Lists and records as JSON text (CSV holds no nested types)."""
    for i, field in enumerate(table.schema):
        if nested(field.type):
            table = table.set_column(i, field.name, json_text(table.column(i).to_pylist()))
    return table
