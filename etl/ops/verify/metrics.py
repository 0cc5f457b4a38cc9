"""`etl verify --metrics-file`: the verify's figures as gauges for node-exporter's textfile collector,
written atomically whatever the outcome, labelled with the source and shard as a run's are
(etl/pipeline/metrics.py)."""

from __future__ import annotations

import time

from etl.errors import StorageError
from etl.ops.verify.result import Result

PREFIX = "etl_verify"


def write(path: str, source: str, shard: str, result: Result | None, exit_code: int) -> None:
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
