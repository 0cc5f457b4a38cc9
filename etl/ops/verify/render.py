"""`etl verify -o FILE.html`: the result as one self-contained page in the quality report's style
(etl/dataset/report_html.py)."""

from __future__ import annotations

from html import escape
from typing import Any

from etl.dataset.report_html import card_list, num, page, table
from etl.errors import StorageError
from etl.ops.verify.result import Result


def _examples(row: dict[str, Any]) -> str:
    shown = []
    for kind, examples in row["examples"].items():
        e = examples[0]
        values = e["output"] if kind == "extra" else e["source"]
        text = "/".join(f"{v:g}" for v in values)
        if kind == "changed":
            text += " at the source, " + "/".join(f"{v:g}" for v in e["output"]) + " in the output"
        shown.append(f"{kind} {e['ts']} {text}")
    return "; ".join(shown)


def html(result: Result, command: str) -> str:
    record = result.as_dict(command)
    bad = record["differing"] > 0
    cards = [
        ("verdict", record["status"], record["exit_code"] != 0),
        ("windows verified", f"{record['verified']:,} of {record['candidates']:,}", False),
        ("differing", f"{record['differing']:,}", bad),
        ("rows missing", f"{record['missing']:,}", record["missing"] > 0),
        ("rows extra", f"{record['extra']:,}", record["extra"] > 0),
        ("values changed", f"{record['changed']:,}", record["changed"] > 0),
        ("requests", f"{record['requests']:,}", False),
    ]
    series = table(
        "series",
        [{"series": name, **figures} for name, figures in record["series"].items()],
        [
            ("series", lambda r: r["series"], None),
            ("windows", lambda r: f"{r['windows']:,}", num("windows")),
            ("differ", lambda r: f"{r['differing']:,}", num("differing")),
            ("rows at the source", lambda r: f"{r['source_rows']:,}", num("source_rows")),
            ("rows in the output", lambda r: f"{r['output_rows']:,}", num("output_rows")),
            ("missing", lambda r: f"{r['missing']:,}", num("missing")),
            ("extra", lambda r: f"{r['extra']:,}", num("extra")),
            ("changed", lambda r: f"{r['changed']:,}", num("changed")),
        ],
    )
    windows = table(
        "windows",
        record["windows"],
        [
            ("series", lambda r: r["series"], None),
            ("parameter", lambda r: r["param_id"], num("param_id")),
            ("object", lambda r: r["object_id"], num("object_id")),
            ("from", lambda r: r["start"], None),
            ("to", lambda r: r["end"], None),
            ("missing", lambda r: f"{r['missing']:,}", num("missing")),
            ("extra", lambda r: f"{r['extra']:,}", num("extra")),
            ("changed", lambda r: f"{r['changed']:,}", num("changed")),
            ("for example", _examples, None),
        ],
    )
    shown = len(record["windows"])
    more = f" (the first {shown} of {record['differing']:,})" if record["differing"] > shown else ""
    sample = "every window" if record["sample"] == "all" else f"a sample of {record['sample']:g}"
    return page(
        f"Verify: {result.source}, {record['from']} .. {record['to']}",
        f"""<h1>Output against source: {escape(result.source)}</h1>
<div class="muted">{escape(result.output)}, windows checkpointed from {escape(record["from"])} to
{escape(record["to"])}, {escape(sample)} (seed {record["seed"]}), verify {escape(record["verify_id"])}</div>
<div class="cards">{card_list(cards)}</div>
<p><b>{escape(record["verdict"])}</b></p>

<h2>By series</h2>
{series}

<h2>Differing windows{escape(more)}</h2>
{windows}

<h2>What the figures mean</h2>
<dl>
<dt>missing</dt><dd>a stamp the source serves and the output lacks</dd>
<dt>extra</dt><dd>a stamp the output holds and the source does not serve, or holds twice</dd>
<dt>changed</dt><dd>a stamp in both whose values differ</dd>
<dt>left out</dt><dd>{record["left_out"]["unsettled"]:,} (parameter, series) whose newest stretch the next
run reads again; {record["left_out"]["unlisted"]:,} checkpointed parameter(s) no longer listed</dd>
</dl>
""",
    )


def write_html(path: str, result: Result, command: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(html(result, command))
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None


__all__ = ["html", "write_html"]
