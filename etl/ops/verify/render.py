"""`etl verify -o FILE.html` and `--metrics-file`: the result as one self-contained page in the quality
report's style (etl/dataset/report_html.py), and as gauges for node-exporter's textfile collector."""

from __future__ import annotations

import time
from html import escape
from typing import Any

from etl.dataset.report_html import card_list, num, page, table
from etl.errors import StorageError
from etl.ops.verify.result import Result

PREFIX = "etl_verify"


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


def write_metrics(path: str, source: str, shard: str, result: Result | None, exit_code: int) -> None:
    """The verify's figures (`result` None: it ended in an error) to `path`, atomically; labelled with the
    source and shard as a run's are."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()
    gauges: dict[str, Gauge] = {}

    def gauge(name: str, text: str, value: float, **labels: str) -> None:
        metric = gauges.get(name) or Gauge(
            f"{PREFIX}_{name}", text, ["source", "shard", *labels], registry=registry
        )
        gauges[name] = metric
        metric.labels(source=source, shard=shard, **labels).set(value)

    gauge(
        "success",
        "1 if the last verify found the output equal to the source (or repaired it), else 0",
        exit_code == 0,
    )
    gauge("exit_code", "Exit code of the last verify", exit_code)
    gauge("finished_timestamp_seconds", "When the last verify ended (Unix time)", time.time())
    if result is not None:
        record = result.as_dict()
        gauge("seconds", "Duration of the last verify", record["seconds"])
        gauge("requests", "Requests the last verify sent", record["requests"])
        gauge(
            "candidate_windows",
            "Checkpointed windows the last verify drew its sample from",
            record["candidates"],
        )
        gauge(
            "windows_not_verified",
            "Sampled windows the last verify left out (--max-requests spent)",
            record["not_verified"],
        )
        gauge(
            "windows_failed", "Sampled windows the source did not serve to the last verify", record["failed"]
        )
        gauge(
            "windows_repaired",
            "Windows the last verify rewrote (--repair)",
            (record["repaired"] or {}).get("windows", 0),
        )
        for name, f in sorted(record["series"].items()):
            gauge("windows", "Windows the last verify compared", f["windows"], series=name)
            gauge(
                "windows_differing",
                "Windows the last verify found different from the source",
                f["differing"],
                series=name,
            )
            gauge("rows_missing", "Rows the source serves that the output lacks", f["missing"], series=name)
            gauge(
                "rows_extra", "Rows the output holds that the source does not serve", f["extra"], series=name
            )
            gauge("rows_changed", "Rows whose values differ from the source's", f["changed"], series=name)
    try:
        write_to_textfile(path, registry)
    except OSError as exc:
        raise StorageError(f"cannot write the metrics file {path}: {exc.strerror or exc}") from None


def write_html(path: str, result: Result, command: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(html(result, command))
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None


__all__ = ["html", "write_html", "write_metrics"]
