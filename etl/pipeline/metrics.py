"""A run's figures in the Prometheus text format, for node-exporter's textfile collector.

`etl run --metrics-file /var/lib/node_exporter/textfile/etl.prom` writes them after every run, failed or
not, atomically (a temp name beside the file, then a rename: the collector never reads half a file).
Every value describes the last run (gauges); the labels name the source and the shard.
"""

from __future__ import annotations

import os
import time
from typing import cast

from etl.errors import ConfigError, StorageError
from etl.pipeline.summary import RunSummary

PREFIX = "etl_run"
# The summary's `late` figures, each a gauge etl_late_{key}.
LATE = {
    "points": "Raw points the last run fetched after a run had read past them",
    "longest_seconds": "The longest a late point of the last run took to reach the platform, at least",
    "quiet_parameters": "Parameters quiet for over a day, whose tails the last run probed",
    "quiet_past_late_max": "Parameters quiet for longer than window.late_max "
    "(older points are looked for when they send again)",
    "back_past_late_max": "Parameters back after longer than window.late_max with older points "
    "(fetched by the last run)",
    "revised_blocks": "Blocks of revised values the last run fetched again",
}


def check_path(path: str) -> None:
    """Fail before the run if the file's folder does not exist."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"--metrics-file {path}: no such folder {folder}")


def write(path: str, run: RunSummary, source: str, exit_code: int) -> None:
    """The run summary's figures, as its JSON form gives them, to `path`, atomically."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    summary = run.as_dict()
    registry = CollectorRegistry()
    base = {"source": source, "shard": summary.get("shard") or ""}

    def gauge(name: str, text: str, value: float | None, **labels: str) -> None:
        if value is None:
            return
        names = [*base, *labels]
        metric = metrics.get(name) or Gauge(name, text, names, registry=registry)
        metrics[name] = metric
        metric.labels(**base, **labels).set(value)

    metrics: dict[str, Gauge] = {}
    gauge(f"{PREFIX}_success", "1 if the last run succeeded, else 0", float(exit_code == 0))
    gauge(f"{PREFIX}_exit_code", "Exit code of the last run", exit_code)
    gauge(f"{PREFIX}_finished_timestamp_seconds", "When the last run ended (Unix time)", time.time())
    gauge(f"{PREFIX}_seconds", "Duration of the last run", summary.get("seconds", 0.0))
    gauge(f"{PREFIX}_cpu_seconds", "CPU time of the last run (its process)", summary.get("cpu_seconds", 0.0))
    gauge(f"{PREFIX}_parameters", "Parameters the last run exported", summary.get("parameters", 0))
    for series, figures in sorted((summary.get("series") or {}).items()):
        gauge(f"{PREFIX}_points", "Points written by the last run", figures["points"], series=series)
        gauge(
            f"{PREFIX}_windows",
            "Windows fetched and written by the last run",
            figures["windows"],
            series=series,
        )
    gauge(f"{PREFIX}_requests", "Requests sent by the last run", summary.get("requests", 0))
    for what, count in sorted((summary.get("requests_by_purpose") or {}).items()):
        gauge(
            f"{PREFIX}_requests_by_purpose",
            "Requests of the last run, by what they were for",
            count,
            purpose=what,
        )
    gauge(
        f"{PREFIX}_request_floor",
        "The fewest requests the last run could have made: one per parameter and series with new data, "
        "plus the sign-in and the object list",
        summary.get("request_floor", 0),
    )
    backfill = summary.get("backfill")
    for series, left in sorted((backfill["series"] if backfill else {}).items()):
        gauge(
            "etl_backfill_days_left",
            "Parameter-days of history still to load",
            left["days_left"],
            series=series,
        )
        gauge(
            "etl_backfill_windows_left",
            "Windows of history still to load",
            left["windows_left"],
            series=series,
        )
        gauge(
            "etl_backfill_share_done", "Share of the history loaded (0-1)", left["share_done"], series=series
        )
    if backfill:
        gauge(
            "etl_backfill_eta_runs",
            "Runs until the history is loaded, at the last runs' rate",
            backfill["eta_runs"],
        )
    gauge(f"{PREFIX}_retries", "Requests retried by the last run", summary.get("retries", 0))
    for reason, count in sorted((summary.get("retries_by_reason") or {}).items()):
        gauge(f"{PREFIX}_retries_by_reason", "Retries of the last run, by reason", count, reason=reason)
    capacity = summary["capacity"]
    used, latency = capacity["concurrency"], capacity["latency_ms"]
    for stat, limit in (("max", used["max"]), ("median", used["median"]), ("min", used["min"])):
        gauge(
            f"{PREFIX}_concurrency",
            "Requests the last run allowed in flight (its limit at each answer): min, median, max",
            limit,
            stat=stat,
        )
    for name, text, value in (
        ("baseline", "the latency baseline (answers with nothing of the run's waiting)", latency["baseline"]),
        ("p95", "95% of the answers came within", latency["p95"]),
    ):
        gauge(
            f"{PREFIX}_latency_{name}_seconds",
            f"Last run: {text}, seconds",
            None if value is None else value / 1000,
        )
    gauge(
        f"{PREFIX}_refused",
        "Requests the server refused for its load in the last run (429, 503)",
        capacity["refused"],
    )
    gauge(f"{PREFIX}_relogins", "Re-sign-ins of the last run (ended sessions)", summary.get("relogins", 0))
    gauge(
        f"{PREFIX}_failed_windows",
        "Windows that failed in the last run (fetched again next time)",
        summary.get("failed_window_count", 0),
    )
    gauge(
        f"{PREFIX}_windows_not_done",
        "Windows a stop (a signal, retry.run_deadline) left open in the last run (fetched next time)",
        summary.get("windows_not_done", 0),
    )
    late = cast("dict[str, float]", summary.get("late") or {})  # LateRecord: numbers only
    for key, text in LATE.items():
        gauge(f"etl_late_{key}", text, late.get(key, 0))
    quality = summary.get("quality") or {}
    gauge("etl_quality_rows", "Parameter-days whose quality rows the last run wrote", quality.get("rows", 0))
    gauge(
        "etl_quality_lowest_completeness",
        "Lowest completeness (0-1) among the parameter-days the last run wrote",
        quality.get("lowest_completeness"),
    )
    catalog = summary["catalog"]
    gauge(
        "etl_catalog_objects_listed",
        "Objects whose parameters the last run listed",
        catalog["objects_listed"],
    )
    gauge(
        "etl_catalog_age_seconds",
        "Age of the oldest listing the last run kept from the fleet's catalog",
        catalog["age_seconds"],
    )
    gauge(
        "etl_catalog_parameters_gone",
        "Parameters the last run took out of the catalog (no longer listed, or 404)",
        catalog["gone_count"],
    )
    try:
        write_to_textfile(path, registry)
    except OSError as exc:
        raise StorageError(f"cannot write the metrics file {path}: {exc.strerror or exc}") from None
