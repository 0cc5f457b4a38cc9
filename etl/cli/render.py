"""What the commands print: tables, JSON, the run summary and the plan. Text from the server goes out
through `etl.support.terminal`: no control or bidirectional formatting character reaches the terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click
import orjson

from etl.support.terminal import json_for_terminal, printable
from etl.timeutil import iso

if TYPE_CHECKING:
    from etl.client.models import Candles, Points


def plain(value: Any) -> Any:
    """A typed record as the platform sent it (plus what we derived); anything else unchanged."""
    return value.raw() if hasattr(value, "raw") else value


def echo_json(value: Any) -> None:
    # orjson writes dataclasses field by field itself, so records become plain before it sees them.
    value = [plain(v) for v in value] if isinstance(value, list) else plain(value)
    text = orjson.dumps(value, default=plain, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    click.echo(json_for_terminal(text.decode()))


def echo_table(rows: list[dict], columns: Iterable[str] | None = None) -> None:
    if not rows:
        click.echo("(nothing)")
        return
    columns = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    header = [printable(str(c)) for c in columns]  # the server's field names too
    widths = [min(48, max(len(c), *(len(row[i]) for row in cells))) for i, c in enumerate(header)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(v[:w].ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def echo_record(record: dict) -> None:
    """One record reads better as field/value lines than as one very wide row."""
    echo_table([{"field": k, "value": v} for k, v in record.items()])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return printable(json_for_terminal(orjson.dumps(value).decode()))
    return printable(str(value))


def series_rows(data: Points | Candles) -> list[dict]:
    from etl.client.models import Candles

    if isinstance(data, Candles):
        return [
            {"ts": iso(int(t)), "open": o, "high": h, "low": lo, "close": c}
            for t, o, h, lo, c in zip(data.ts, data.open, data.high, data.low, data.close, strict=True)
        ]
    return [{"ts": iso(int(t)), "value": float(v)} for t, v in zip(data.ts, data.value, strict=True)]


def summary_text(summary: dict) -> str:
    lines = [
        f"run {summary['run_id']}: {summary['status']} in {summary['seconds']:.1f}s",
        f"  window      {summary['window']['start']} .. {summary['window']['end']}"
        if summary["window"]
        else "",
        f"  objects     {summary['objects']}    parameters {summary['parameters']}"
        + (f"    shard {summary['shard']}" if summary.get("shard") else ""),
        f"  executor    {summary['executor']}" if summary.get("executor", "local") != "local" else "",
    ]
    for name, s in summary["series"].items():
        lines.append(
            f"  {name:<11} {s['windows']:>6} windows {s['points']:>12,} points {s['files']:>5} files"
        )
    if not summary["series"] and summary["status"] == "ok":
        lines.append("  series      nothing new: the checkpoints already cover this window")
    lines.append(
        f"  requests    {summary['requests']}    retries {summary['retries']}    re-sign-ins {summary['relogins']}"
        f"    splits {summary['splits']}    continuations {summary['continuations']}"
    )
    quality = summary.get("quality") or {}
    if quality.get("rows"):
        lowest = quality.get("lowest_completeness")
        lines.append(
            f"  quality     {quality['rows']} parameter-days"
            + (f"    lowest completeness {lowest:.3f}" if lowest is not None else "")
        )
    if summary["warnings"]:
        lines.append("  warnings    " + ", ".join(f"{k}={v}" for k, v in summary["warnings"].items()))
    if summary["failed_window_count"]:
        lines.append(f"  failed      {summary['failed_window_count']} windows (see the run summary JSON)")
    lines.append(f"  output      {summary['output']}")
    return "\n".join(line for line in lines if line)


def plan_text(summary: dict) -> str:
    lines = [
        f"window      {summary['window']['start']} .. {summary['window']['end']}",
        f"objects     {summary['objects']}    parameters {summary['parameters']}",
    ]
    for name, p in sorted(summary["planned"].items()):
        lines.append(
            f"{name:<11} {p['parameters']:>5} parameters {p['slabs']:>5} slabs {p['windows']:>7} windows"
        )
    total = sum(p["windows"] for p in summary["planned"].values())
    lines.append(f"requests    {total} (one per window; full answers are split and add more)")
    return "\n".join(lines)
