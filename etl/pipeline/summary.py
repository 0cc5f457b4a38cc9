"""What a run did: `RunSummary`, the same object whether the run succeeded (`etl.run` returns it) or not
(the error it raises carries it), its JSON form (`as_dict`: `etl run --json`, `_runs/{run_id}.json`
and the metrics file read it) and its forms for people (`text`, what `etl run` prints; a one-line repr
and an HTML table for notebooks)."""

from __future__ import annotations

import asyncio
import html
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NotRequired, TypedDict

from etl.client import ClientStats
from etl.client.concurrency import CapacityRecord
from etl.client.retry import ClientRecord
from etl.errors import EtlError, Interrupted, RunDeadline
from etl.model import Shard
from etl.pipeline.catalog import CatalogFigures, CatalogRecord
from etl.pipeline.counts import Counts
from etl.pipeline.plan import History
from etl.pipeline.progress import NOTHING_NEW
from etl.state.store import Progress
from etl.support import redact
from etl.timeutil import DAY_MS, HOUR_MS, duration_text, iso


def record_id() -> str:
    """The name of a run's record (and a verify's): names sort as the commands started (doctor's "last
    run" is the last name), to the millisecond; three random hex digits keep two of one millisecond
    (shards) apart."""
    now = datetime.now(tz=UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond // 1000:03d}{uuid.uuid4().hex[:3]}"


@dataclass
class SeriesTotals:
    slabs: int = 0
    windows: int = 0
    points: int = 0
    files: set[str] = field(default_factory=set)


class LateRecord(TypedDict):
    points: int
    longest_seconds: float
    quiet_parameters: int
    quiet_past_late_max: int
    back_past_late_max: int
    revised_blocks: int
    probes: int


@dataclass
class LateFigures:
    """What a run found of late and revised data (etl/pipeline/late.py)."""

    points: int = 0  # raw points fetched after a run had read past their stamps
    longest_ms: int = 0  # the longest of them took at least this long to reach the platform
    quiet: int = 0  # parameters whose raw tail was long enough to be probed
    past_late_max: int = 0  # parameters quiet for longer than window.late_max
    backlog: int = 0  # of those, parameters back with points older than late_max (fetched)
    revised: int = 0  # blocks of calculated parameters' averages that changed since they were read
    probes: int = 0  # requests for averages sent to find them

    def as_dict(self) -> LateRecord:
        return {
            "points": self.points,
            "longest_seconds": round(self.longest_ms / 1000, 3),
            "quiet_parameters": self.quiet,
            "quiet_past_late_max": self.past_late_max,
            "back_past_late_max": self.backlog,
            "revised_blocks": self.revised,
            "probes": self.probes,
        }


class BackfillRecord(TypedDict):
    windows_left: int
    days_left: float
    share_done: float


class ProgressRecord(TypedDict):
    series: dict[str, BackfillRecord]
    days_per_run: float | None  # parameter-days loaded per run, over the last runs
    eta_runs: float | None
    eta_hours: float | None


@dataclass
class Backfill:
    """The history still to load after the run, per series (parameter-time behind each parameter's
    frontier, etl/pipeline/plan.py), and how fast the last runs loaded it (etl/state/store.py `progress`)."""

    left: dict[str, History] = field(default_factory=dict)
    days_per_run: float | None = None
    hours_between_runs: float | None = None

    @property
    def days_left(self) -> float:
        return sum(h.ms for h in self.left.values()) / DAY_MS

    def eta_runs(self) -> float | None:
        if not self.days_left:
            return 0.0
        return self.days_left / self.days_per_run if self.days_per_run else None

    def as_dict(self) -> ProgressRecord:
        runs = self.eta_runs()
        return {
            "series": {
                name: {
                    "windows_left": h.windows,
                    "days_left": round(h.ms / DAY_MS, 3),
                    "share_done": round(h.share_done, 4),
                }
                for name, h in sorted(self.left.items())
            },
            "days_per_run": None if self.days_per_run is None else round(self.days_per_run, 3),
            "eta_runs": None if runs is None else round(runs, 1),
            "eta_hours": (
                None
                if runs is None or self.hours_between_runs is None
                else round(runs * self.hours_between_runs, 1)
            ),
        }

    @classmethod
    def of(cls, runs: list[Progress]) -> Backfill:
        """What the last of these runs left, at the rate of them all: parameter-days loaded a run, hours
        between runs."""
        if not runs:
            return cls()
        first, last, n = runs[0], runs[-1], len(runs) - 1
        backfill = cls({name: History(*figures) for name, figures in last.left.items()})
        if n:
            backfill.days_per_run = max((first.left_ms - last.left_ms) / DAY_MS / n, 0.0)
            backfill.hours_between_runs = (last.at - first.at) / HOUR_MS / n
        return backfill

    def progress(self, at: int) -> Progress:
        return Progress(at, {name: (h.windows, h.ms, h.total_ms) for name, h in self.left.items()})

    def text(self) -> str:
        """One line: what is left, and when it should be in (empty: nothing left)."""
        if not self.days_left:
            return ""
        record = self.as_dict()
        parts = ", ".join(
            f"{name} {r['days_left']:g} parameter-days ({r['windows_left']} windows, {r['share_done']:.0%} done)"
            for name, r in record["series"].items()
            if r["days_left"]
        )
        if record["eta_runs"] is None:
            return f"{parts}    no rate yet"
        hours = f", about {duration_text(record['eta_hours'] * 3600)}" if record["eta_hours"] else ""
        return f"{parts}    about {record['eta_runs']:g} more runs{hours}"


class WindowRecord(TypedDict):
    start: str
    end: str


class SeriesRecord(TypedDict):
    slabs: int
    windows: int
    points: int
    files: int


class QualityRecord(TypedDict):
    rows: int
    lowest_completeness: float | None


class LakeRecord(TypedDict):
    commits: int
    upkeep: dict[str, int] | None


class RunRecord(ClientRecord):
    """`RunSummary` in its JSON form: `etl run --json`, `_runs/{run_id}.json`, the metrics file."""

    run_id: str
    status: str
    error: str | None
    started: str
    seconds: float
    cpu_seconds: float
    window: WindowRecord | None
    output: str
    objects: int
    parameters: int
    planned: dict[str, dict[str, int]]
    series: dict[str, SeriesRecord]
    points: int
    splits: int
    continuations: int
    warnings: dict[str, int]
    failed_windows: list[str]
    failed_window_count: int
    windows_not_done: int
    stopped: str | None
    temp_files_removed: int
    executor: str
    shard: str | None
    quality: QualityRecord
    late: LateRecord
    dimensions: list[str]
    request_floor: int
    backfill: ProgressRecord
    catalog: CatalogRecord
    lake: NotRequired[LakeRecord]


@dataclass
class RunSummary:
    run_id: str
    output: str
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    # This process's CPU over the same span (all its threads; a dask cluster's workers are not in it):
    # what a schedule watches to see run 8,760 cost what run 1 did.
    cpu_seconds: float = 0.0
    status: str = "ok"
    error: str | None = None
    objects: int = 0
    parameters: int = 0
    window: tuple[int, int] | None = None
    planned: dict[str, dict[str, int]] = field(default_factory=dict)  # per series: parameters, slabs, windows
    series: dict[str, SeriesTotals] = field(default_factory=lambda: defaultdict(SeriesTotals))
    counts: Counts = field(default_factory=Counts)  # what fetching and cleaning ran into, every slab's
    checkpoints_past_the_server_clock: int = 0  # (parameter, series) whose checkpoints reach past it
    records_left_out: int = 0  # records and reference tables the platform sent that could not be used
    failed_windows: list[str] = field(default_factory=list)
    # Planned windows neither written nor failed: a stop left them open for the next run.
    windows_not_done: int = 0
    # What stopped the run before its end: "signal", "run_deadline", "throttled" (a 429 until past the
    # deadline), "error" (a fatal one); None when it ran to its end.
    stopped: str | None = None
    client: ClientStats = field(default_factory=ClientStats)
    temp_files_removed: int = 0
    executor: str = "local"
    shard: Shard | None = None
    quality_rows: int = 0  # (parameter, day) rows written to the quality dataset
    lake_commits: int = 0  # lake tables: grouped commits of the series tables
    upkeep: dict[str, int] | None = None  # lake tables: what the run's maintenance did
    dimensions: list[str] = field(default_factory=list)  # the dimension tables written
    lowest_completeness: float | None = None  # among them
    late: LateFigures = field(default_factory=LateFigures)
    # One request per parameter and series with new data, plus the sign-in and the object list: what an
    # hourly run cannot cost less than (its requests by purpose are the client's).
    request_floor: int = 0
    backfill: Backfill = field(default_factory=Backfill)
    # What the run listed, kept and took out of the fleet's catalog (etl/pipeline/catalog.py).
    catalog: CatalogFigures = field(default_factory=CatalogFigures)

    def failed(self, exc: BaseException) -> None:
        """The record says how the run ended: interrupted (a signal, its deadline) or failed."""
        stopped = isinstance(exc, Interrupted | RunDeadline | KeyboardInterrupt | asyncio.CancelledError)
        self.status = "interrupted" if stopped else "failed"
        self.error = redact.redact(
            str(exc) if isinstance(exc, EtlError) else f"{type(exc).__name__}: {exc}".removesuffix(": ")
        )

    def add_quality(self, rows: int, lowest: float | None) -> None:
        self.quality_rows += rows
        if lowest is not None:
            self.lowest_completeness = (
                lowest if self.lowest_completeness is None else min(self.lowest_completeness, lowest)
            )

    def warnings(self) -> dict[str, int]:
        """What went oddly, by name, in name order: the odd points dropped, checkpoints past the server's
        clock, records left out; only those there were."""
        found = {
            **self.counts.warnings(),
            "checkpoints_past_the_server_clock": self.checkpoints_past_the_server_clock,
            "records_left_out": self.records_left_out,
        }
        return {name: count for name, count in sorted(found.items()) if count}

    def as_dict(self) -> RunRecord:
        client = self.client.as_dict()
        record: RunRecord = {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "started": datetime.fromtimestamp(self.started, tz=UTC).isoformat(timespec="seconds"),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "window": {"start": iso(self.window[0]), "end": iso(self.window[1])} if self.window else None,
            "output": self.output,
            "objects": self.objects,
            "parameters": self.parameters,
            "planned": self.planned,
            "series": {
                str(name): {"slabs": t.slabs, "windows": t.windows, "points": t.points, "files": len(t.files)}
                for name, t in sorted(self.series.items())
            },
            "points": sum(t.points for t in self.series.values()),
            "requests": client["requests"],
            "retries": client["retries"],
            "retries_by_reason": client["retries_by_reason"],
            "relogins": client["relogins"],
            "throttled_seconds": client["throttled_seconds"],
            "bytes_received": client["bytes_received"],
            "requests_by_purpose": client["requests_by_purpose"],
            "capacity": client["capacity"],
            "splits": self.counts.splits,
            "continuations": self.counts.continuations,
            "warnings": self.warnings(),
            "failed_windows": self.failed_windows[:50],
            "failed_window_count": len(self.failed_windows),
            "windows_not_done": self.windows_not_done,
            "stopped": self.stopped,
            "temp_files_removed": self.temp_files_removed,
            "executor": self.executor,
            "shard": str(self.shard) if self.shard else None,
            "quality": {"rows": self.quality_rows, "lowest_completeness": self.lowest_completeness},
            "late": self.late.as_dict(),
            "dimensions": self.dimensions,
            "request_floor": self.request_floor,
            "backfill": self.backfill.as_dict(),
            "catalog": self.catalog.as_dict(),
        }
        if self.upkeep is not None or self.lake_commits:
            record["lake"] = {"commits": self.lake_commits, "upkeep": self.upkeep}
        return record

    def record(self) -> str:
        """Where the run's record (`as_dict` as JSON) is written: `_runs/` in the output."""
        return f"{self.output.rstrip('/')}/_runs/{self.run_id}.json"

    def headline(self) -> str:
        return f"run {self.run_id}: {self.status} in {self.seconds:.1f}s"

    def rows(self) -> list[tuple[str, str]]:
        """(what, figures) lines of the summary for people, in the order `etl run` prints them."""
        summary = self.as_dict()
        rows: list[tuple[str, str]] = []
        if summary["window"]:
            rows.append(("window", f"{summary['window']['start']} .. {summary['window']['end']}"))
        rows.append(
            (
                "objects",
                f"{summary['objects']}    parameters {summary['parameters']}"
                + (f"    shard {summary['shard']}" if summary["shard"] else ""),
            )
        )
        if self.catalog.objects:
            rows.append(("catalog", self.catalog.text()))
        if gone := self.catalog.gone_text():
            rows.append(("gone", gone))
        if summary["executor"] != "local":
            rows.append(("executor", summary["executor"]))
        for name, s in summary["series"].items():
            rows.append((name, f"{s['windows']:>6} windows {s['points']:>12,} points {s['files']:>5} files"))
        if not summary["series"] and summary["status"] == "ok":
            rows.append(("series", NOTHING_NEW))
        rows.append(
            (
                "requests",
                f"{summary['requests']}    retries {summary['retries']}    re-sign-ins {summary['relogins']}"
                f"    splits {summary['splits']}    continuations {summary['continuations']}",
            )
        )
        if purposes := summary["requests_by_purpose"]:
            floor = summary["request_floor"]
            ratio = f" ({summary['requests'] / floor:.2f}x the floor of {floor})" if floor else ""
            rows.append(
                ("spent on", ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in purposes.items()) + ratio)
            )
        if line := self.backfill.text():
            rows.append(("history", line))
        if line := _capacity_text(summary.get("capacity")):
            rows.append(("capacity", line))
        late = self.late
        if late.points or late.quiet or late.revised:
            rows.append(
                (
                    "late",
                    f"{late.points} points, the longest {duration_text(late.longest_ms / 1000) or '0s'} after its "
                    f"stamp    quiet {late.quiet} (past late_max {late.past_late_max})    revised blocks {late.revised}",
                )
            )
        if self.quality_rows:
            lowest = self.lowest_completeness
            rows.append(
                (
                    "quality",
                    f"{self.quality_rows} parameter-days"
                    + (f"    lowest completeness {lowest:.3f}" if lowest is not None else ""),
                )
            )
        if summary["warnings"]:
            rows.append(("warnings", ", ".join(f"{k}={v}" for k, v in summary["warnings"].items())))
        if self.failed_windows:
            rows.append(("failed", f"{len(self.failed_windows)} windows (listed in {self.record()})"))
        if summary.get("windows_not_done"):
            stopped = (summary.get("stopped") or "").replace("_", " ")
            rows.append(
                (
                    "not done",
                    f"{summary['windows_not_done']} windows, left open"
                    + (f" (stopped: {stopped})" if stopped else ""),
                )
            )
        rows.append(("output", self.output))
        return rows

    def text(self) -> str:
        """The summary for people: what `etl run` prints."""
        return "\n".join([self.headline(), *(f"  {what:<11} {figures}" for what, figures in self.rows())])

    def __repr__(self) -> str:
        points = sum(t.points for t in self.series.values())
        failed = f", failed_windows={len(self.failed_windows)}" if self.failed_windows else ""
        return (
            f"RunSummary(run_id={self.run_id!r}, status={self.status!r}, points={points}{failed}, "
            f"seconds={self.seconds:.1f}, output={self.output!r})"
        )

    def _repr_html_(self) -> str:
        """A notebook's view of the summary: the lines of `text()` as a table."""
        cells = "".join(
            f"<tr><th style='text-align: left'>{html.escape(what)}</th>"
            f"<td style='text-align: left'><code>{html.escape(' '.join(figures.split()))}</code></td></tr>"
            for what, figures in self.rows()
        )
        return f"<p><b>{html.escape(self.headline())}</b></p><table>{cells}</table>"


def _capacity_text(capacity: CapacityRecord | None) -> str:
    """The limit on requests in flight and what the answers took, in one line (empty: nothing sent)."""
    if not capacity or capacity["concurrency"]["max"] is None:
        return ""
    used, latency = capacity["concurrency"], capacity["latency_ms"]
    setting = (
        f"auto (at most {capacity['max']})"
        if capacity["setting"] == "auto"
        else f"fixed {capacity['setting']}"
    )
    # A run stopped early, or with nothing to fetch, measured no round of answers: no figure, not "None".
    figures = [f"{name} {latency[name]} ms" for name in ("baseline", "p95") if latency[name] is not None]
    return (
        f"concurrency {setting}: {used['min']}..{used['max']}, median {used['median']}    "
        f"latency {', '.join(figures) if figures else 'not measured'}    refused {capacity['refused']}"
    )
