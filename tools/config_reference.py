"""docs/config.md, the config reference, generated from the models in etl/config.py: every key with its
type, default and description, section by section. `make docs-config` writes it; a test fails when the
page and the models differ.

    python -m tools.config_reference           # write docs/config.md
    python -m tools.config_reference --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from etl.config import Config, Duration, Size, section_of
from tools import generated_page

# The validators that make a Duration and a Size (etl/config.py): how their fields are told apart.
_DURATION, _SIZE = typing.get_args(Duration)[1], typing.get_args(Size)[1]
PAGE = Path(__file__).resolve().parent.parent / "docs" / "config.md"

HEADER = """# Configuration reference

<!-- Generated from etl/config.py by `make docs-config` (tools/config_reference.py); do not edit by hand. -->

A config is YAML, validated once: an unknown key, a wrong type or a value out of range is one line
naming the key (`config error: window.start: needs a UTC offset`), exit 2. `${VAR}` or
`${VAR:-default}` anywhere reads the environment. Durations are written `30s`, `15m`, `1h`, `7d` (or a
number of seconds), sizes `64MB`, `1GiB` (or a number of bytes), times ISO 8601 with a UTC offset
(`2026-11-01T00:00:00Z`). `configs/demo.yaml` is a commented example; a minimal one by hand:
[operations.md](operations.md#when-etl-init-cannot-finish-a-config-by-hand).
"""


def _unit(annotation: Any, metadata: list[Any]) -> str | None:
    """ "duration" or "size" when the field is one (alone, or in a union with None), else None."""
    found = [*metadata]
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is typing.Annotated:
            found += typing.get_args(arg)[1:]
    return "duration" if _DURATION in found else "size" if _SIZE in found else None


def type_text(annotation: Any, metadata: list[Any]) -> str:
    """A field's type as a config writes it, with its bounds."""
    unit = _unit(annotation, metadata)
    text = (
        _type(annotation)
        if unit is None
        else unit + (" or `off`" if type(None) in typing.get_args(annotation) else "")
    )
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    above = next((m.gt for m in metadata if isinstance(m, annotated_types.Gt)), None)
    if low is not None and high is not None:
        text += f", {low}-{high}"
    elif low is not None:
        text += f", at least {low}"
    elif above is not None:
        text += f", above {above}"
    return text


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0], list(args[1:]))
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None)) + (
            " or none" if type(None) in args else ""
        )
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, SecretStr):
        return "text (secret)"
    if isinstance(annotation, type) and issubclass(annotation, str) and annotation is not str:  # an enum
        return " \\| ".join(f"`{member.value}`" for member in annotation)  # type: ignore[attr-defined]
    names = {str: "text", int: "integer", float: "number", bool: "true \\| false", Path: "path"}
    names[datetime] = "time (ISO 8601, with a UTC offset)"
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "default_written" in extra:  # a default the model holds as None or ""
        return str(extra["default_written"])
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "none"
    unit = _unit(field.annotation, list(field.metadata))
    if unit == "duration":
        return f"`{human(value)}`"
    if unit == "size":
        return f"`{value // 2**20}MiB`" if value % 2**20 == 0 else f"`{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`[" + ", ".join(str(getattr(v, "value", v)) for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{getattr(value, 'value', value)}`"


def human(ms: int) -> str:
    if ms == 0:
        return "0s"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def sections(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(dotted name, model) of every section, depth first, the top level first."""
    found = [(prefix, model)]
    for name, field in model.model_fields.items():
        inner = section_of(field.annotation)
        if inner is not None:
            found += sections(inner, f"{prefix}{name}.")
    return found


def render() -> str:
    out = [HEADER]
    for prefix, model in sections(Config):
        keys = [
            (field.alias or name, field)  # a key named as users write it (sink.schema)
            for name, field in model.model_fields.items()
            if section_of(field.annotation) is None
        ]
        if not keys:
            continue
        out.append(f"\n## `{prefix.rstrip('.')}`\n" if prefix else "\n## The top level\n")
        doc = (model.__doc__ or "").strip()
        if prefix and doc and not doc.startswith(model.__name__):
            out.append("\n" + " ".join(doc.split()) + "\n")
        out.append("\n| key | type | default | description |\n|---|---|---|---|\n")
        for name, field in keys:
            description = " ".join((field.description or "").split()).replace("|", "\\|")
            out.append(
                f"| `{prefix}{name}` | {type_text(field.annotation, list(field.metadata))} "
                f"| {default_text(field)} | {description} |\n"
            )
    return "".join(out)


if __name__ == "__main__":
    raise SystemExit(generated_page.main(PAGE, render, "docs-config", sys.argv[1:]))
