"""What the commands print: tables, JSON, the run summary and the plan. Text from the server goes out
through `etl.support.terminal`: no control or bidirectional formatting character reaches the terminal."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click
import orjson

from etl.support.terminal import json_for_terminal, printable
from etl.timeutil import iso

if TYPE_CHECKING:
    from etl.client.models import Candles, Points
    from etl.pipeline.summary import RunRecord


def plain(value: Any) -> Any:
    """A typed record as the platform sent it (plus what we derived); anything else unchanged."""
    return value.raw() if hasattr(value, "raw") else value


def echo_json(value: object) -> None:
    # orjson writes dataclasses field by field itself, so records become plain before it sees them.
    value = [plain(v) for v in value] if isinstance(value, list) else plain(value)
    text = orjson.dumps(value, default=plain, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    click.echo(json_for_terminal(text.decode()))


WIDEST = 48  # characters of a table cell; a longer one is cut, and ends with an ellipsis
ELLIPSIS = "…"
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?")
_BREAKS = ' ,;:{}[]()"'  # a cut falls after one of these when one is near (not inside a word)


def fit(text: str, width: int = WIDEST) -> str:
    """`text` in about `width` characters: cut at a word's end when one is near, never inside a time stamp
    (one that the cut would fall in is kept whole), with an ellipsis that says so."""
    if len(text) <= width:
        return text
    cut = width - len(ELLIPSIS)
    stamp = next((m for m in _STAMP.finditer(text) if m.start() < cut < m.end()), None)
    if stamp is not None:  # the whole stamp stays: a cell may be a few characters wider
        cut = stamp.end()
        if cut == len(text):
            return text
    else:
        near = max(text.rfind(c, 0, cut) for c in _BREAKS) + 1
        if near > cut - 16:
            cut = near
    return text[:cut].rstrip() + ELLIPSIS


def echo_table(
    rows: Sequence[Mapping[str, object]], columns: Iterable[str] | None = None, numeric: Iterable[str] = ()
) -> None:
    """Rows as aligned columns (`numeric` ones to the right); cells cut by `fit`."""
    if not rows:
        click.echo("(nothing)")
        return
    columns = list(columns or rows[0].keys())
    echo_cells(columns, [[_cell(r.get(c)) for c in columns] for r in rows], set(numeric))


def echo_cells(columns: list[str], rows: list[list[str]], right: set[int] | set[str] = set()) -> None:  # noqa: B006
    """Text cells under their column names (the columns in `right`, by name or position, to the right)."""
    cells = [[fit(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    flush_right = [i in right or c in right for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, flush_right, strict=True)
        ).rstrip()

    click.echo(line([printable(c) for c in columns]))  # the server's field names too
    for row in cells:
        click.echo(line(row))


def value_text(value: object) -> str:
    """A query result's value for people: stamps in ISO 8601 (Z for UTC), floats to 6 decimals, NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        text = value.isoformat(sep="T", timespec="milliseconds" if value.microsecond else "seconds")
        return text.replace("+00:00", "Z")
    if isinstance(value, float):
        return f"{value:.6g}" if value and abs(value) < 1e-3 else str(round(value, 6))
    return _cell(value)


def echo_record(record: Mapping[str, object]) -> None:
    """One record reads better as field/value lines than as one very wide row."""
    echo_table([{"field": k, "value": v} for k, v in record.items()])


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return printable(json_for_terminal(orjson.dumps(value).decode()))
    return printable(str(value))


def series_rows(data: Points | Candles) -> list[dict[str, object]]:
    from etl.client.models import Candles

    if isinstance(data, Candles):
        return [
            {"ts": iso(int(t)), "open": o, "high": h, "low": lo, "close": c}
            for t, o, h, lo, c in zip(data.ts, data.open, data.high, data.low, data.close, strict=True)
        ]
    return [{"ts": iso(int(t)), "value": float(v)} for t, v in zip(data.ts, data.value, strict=True)]


def plan_text(summary: RunRecord) -> str:
    from etl.pipeline.catalog import catalog_text  # the pipeline is loaded by the plan already

    window = summary["window"]
    assert window is not None, "a plan has its window"
    lines = [
        f"window      {window['start']} .. {window['end']}",
        f"objects     {summary['objects']}    parameters {summary['parameters']}",
        f"catalog     {catalog_text(summary['catalog'])}",
    ]
    for name, p in sorted(summary["planned"].items()):
        lines.append(
            f"{name:<11} {p['parameters']:>5} parameters {p['slabs']:>5} slabs {p['windows']:>7} windows"
        )
    total = sum(p["windows"] for p in summary["planned"].values())
    lines.append(f"requests    {total} (one per window; full answers are split and add more)")
    lines.append(f"output      {summary['output']}")
    return "\n".join(lines)
