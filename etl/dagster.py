"""Dagster assets of a config (pip install 'etl[dagster]'): one asset per series and one for the quality
dataset, partitioned by UTC day from `window.start`, and a job that runs the schedule's incremental run.

    from dagster import Definitions
    from etl.dagster import etl_assets

    defs = Definitions(**etl_assets("configs/demo.yaml"))

Materializing a range of days is ONE `etl.run(start, end)` (a single-run backfill policy): the run's
window is the range, its checkpoints skip what is already written unless the run config asks for
`full_refresh`. Each materialization carries the run's figures; the quality asset's check reads the
quality rows of the range. etl's exit classes map to Dagster's policies as they do for cron and
Airflow (docs/orchestration.md): 4, 5 and 130 are retried, 8 is skipped, the rest fail with etl's
one line.

Dagster reads the annotations of the functions it decorates: this module leaves them as objects (no
`from __future__ import annotations`)."""

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from os import PathLike
from typing import Any

try:
    import dagster as dg
except ImportError as exc:  # the extra is missing: say which
    raise ImportError("etl.dagster needs dagster: pip install 'etl[dagster]'") from exc

from etl.config import Config, load_config
from etl.dataset.query import connect, views
from etl.errors import EtlError, ExitCode
from etl.model import QUALITY, Series
from etl.pipeline.parent import ParentRun, parent_run
from etl.pipeline.run import run
from etl.pipeline.summary import RunSummary
from etl.timeutil import iso, to_ms

__all__ = ["EtlRunConfig", "etl_assets"]

RETRIED = frozenset({ExitCode.NETWORK, ExitCode.SERVER, ExitCode.INTERRUPTED})
SKIPPED = frozenset({ExitCode.LOCKED})


class EtlRunConfig(dg.Config):
    """What a materialization may ask of its run."""

    full_refresh: bool = False  # fetch the window again, whatever the checkpoints say


def etl_assets(
    config: Config | str | PathLike[str],
    *,
    key_prefix: str | list[str] = "etl",
    group_name: str = "etl",
    completeness: float = 0.95,
    retries: int = 3,
    retry_seconds: float = 60.0,
) -> dict[str, Any]:
    """The assets, the asset check, the `etl_latest` job and its asset job, as keyword arguments of
    `dagster.Definitions`.

    `key_prefix` starts every asset key (etl then raw, quality...); `completeness`: the quality
    check fails when a parameter-day of the materialized range is less complete; `retries` and
    `retry_seconds`: how often and after how long a transient failure (exit 4, 5, 130) is tried again.
    """
    loaded = config if isinstance(config, Config) else load_config(config)
    prefix = [key_prefix] if isinstance(key_prefix, str) else list(key_prefix)
    window = loaded.window
    partitions = dg.DailyPartitionsDefinition(
        start_date=window.start.astimezone(UTC).strftime("%Y-%m-%d"),
        end_date=None if window.end == "now" else _day_after(window.end),
        timezone="UTC",
    )
    retry = (retries, retry_seconds)
    keys = {str(s): dg.AssetKey([*prefix, str(s)]) for s in map(Series, loaded.series)}
    if Series.RAW in loaded.series:
        keys[QUALITY] = dg.AssetKey([*prefix, QUALITY])
    specs = [
        dg.AssetSpec(
            key,
            group_name=group_name,
            skippable=True,
            deps=[keys[Series.RAW.value]] if name == QUALITY else [],
            description=f"etl's {name} dataset of {loaded.source.name}",
            kinds={"etl", loaded.sink.format},
        )
        for name, key in keys.items()
    ]
    checks = (
        [
            dg.AssetCheckSpec(
                "completeness",
                asset=keys[QUALITY],
                description=f"every parameter-day at least {completeness:.0%} complete",
            )
        ]
        if QUALITY in keys
        else []
    )

    @dg.multi_asset(
        name=f"{group_name}_{loaded.source.name}".replace(".", "_").replace("-", "_"),
        specs=specs,
        check_specs=checks,
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=False,
    )
    def assets(context: dg.AssetExecutionContext, config: EtlRunConfig) -> Iterator[Any]:
        window = context.partition_time_window
        start, end = _within(loaded, to_ms(window.start), to_ms(window.end))
        summary = _run(context, loaded, retry, start=start, end=end, full_refresh=config.full_refresh)
        if summary is None:
            return
        for name, key in keys.items():
            yield dg.MaterializeResult(asset_key=key, metadata=_metadata(summary, name))
        if checks:
            yield _completeness(loaded, keys[QUALITY], start, end, completeness)

    @dg.op(name="etl_latest", out=dg.Out(dict, is_required=False))
    def latest(context: dg.OpExecutionContext) -> Iterator[dg.Output[Mapping[str, Any]]]:
        summary = _run(context, loaded, retry)
        if summary is not None:
            record = dict(summary.as_dict())
            yield dg.Output(record, metadata=_metadata(summary, None))

    @dg.job(
        name="etl_latest", description="the schedule's incremental run: what the checkpoints do not cover yet"
    )
    def latest_job() -> None:
        latest()

    return {
        "assets": [assets],
        "jobs": [
            latest_job,
            dg.define_asset_job(f"{group_name}_days", selection=list(keys.values())),
        ],
    }


def _day_after(end: datetime) -> str:
    """The partitions' end (excluded): the day after the one the window ends in, unless it ends at a
    midnight."""
    day = end.astimezone(UTC)
    ms = to_ms(day)
    return iso((ms + 86_400_000 - 1) // 86_400_000 * 86_400_000)[:10]


def _within(config: Config, start: int, end: int) -> tuple[int, int]:
    """A range of days cut to the config's window: a first or last day only partly in it is fetched
    only where it is."""
    window = config.window
    return max(start, window.start_ms), end if window.end == "now" else min(end, window.end_ms(0))


def _run(
    context: dg.OpExecutionContext | dg.AssetExecutionContext,
    config: Config,
    retry: tuple[int, float],
    **options: Any,
) -> RunSummary | None:
    """etl.run, named as the Dagster run's child in its lineage events; None when it was skipped."""
    this = context.run
    try:
        with parent_run(ParentRun("dagster", this.job_name, this.run_id)):
            return run(config, progress=False, **options)
    except EtlError as exc:
        outcome = dagster_outcome(exc, retry)
        if outcome is None:
            context.log.info(f"skipped: etl exit {exc.exit_code}: {exc}")
            return None
        if isinstance(outcome, dg.RetryRequested):
            context.log.warning(f"retried: etl exit {exc.exit_code}: {exc}")
            raise outcome from exc
        raise outcome from None


def dagster_outcome(error: EtlError, retry: tuple[int, float]) -> Exception | None:
    """What Dagster is told of a failed run: RetryRequested (exit 4, 5, 130), None to skip it (8: another
    run holds the lock), else a Failure with etl's line that is not retried."""
    if error.exit_code in SKIPPED:
        return None
    if error.exit_code in RETRIED:
        return dg.RetryRequested(max_retries=retry[0], seconds_to_wait=retry[1])
    return dg.Failure(description=f"etl exit {error.exit_code}: {error}", allow_retries=False)


def _metadata(summary: RunSummary, name: str | None) -> dict[str, Any]:
    record = summary.as_dict()
    series = record["series"].get(name or "", None)
    metadata: dict[str, Any] = {
        "etl_run_id": summary.run_id,
        "points": series["points"] if series else record["points"],
        "windows": series["windows"] if series else sum(s["windows"] for s in record["series"].values()),
        "requests": record["requests"],
        "seconds": record["seconds"],
        "late_points": summary.late.points,
    }
    if name == QUALITY:
        metadata["rows"] = summary.quality_rows
    if summary.lowest_completeness is not None:
        metadata["lowest_completeness"] = summary.lowest_completeness
    if summary.window is not None:
        metadata["window"] = f"{iso(summary.window[0])} .. {iso(summary.window[1])}"
    return metadata


def _completeness(
    config: Config, key: dg.AssetKey, start: int, end: int, threshold: float
) -> dg.AssetCheckResult:
    """The quality rows of the days in [start, end): those below the threshold, read from the quality
    dataset (any format) by DuckDB."""
    con = connect(config)
    try:
        if QUALITY not in views(con):
            return dg.AssetCheckResult(
                asset_key=key, check_name="completeness", passed=False, metadata={"parameter_days": 0}
            )
        rows, lowest, below = con.execute(
            "select count(*), min(completeness), count(*) filter (where completeness < ?) from quality "
            "where source = ? and date >= cast(to_timestamp(? / 1000) as date) "
            "and date < cast(to_timestamp(? / 1000) as date)",
            [threshold, config.source.name, start, end],
        ).fetchone() or (0, None, 0)
    finally:
        con.close()
    return dg.AssetCheckResult(
        asset_key=key,
        check_name="completeness",
        passed=bool(rows) and below == 0,
        metadata={"parameter_days": rows, "below": below, "threshold": threshold}
        | ({"lowest": float(lowest)} if lowest is not None else {}),
    )
