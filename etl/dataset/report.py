"""`etl report`: the quality dataset (etl/quality/) over a span of days, for people and schedulers.

Everything is aggregated in DuckDB over the `quality` view (names and units joined when the dimension
tables are there), so a report holds a few numbers per parameter, and day by day only for the worst
`HEATMAP_ROWS` parameters it draws. The report covers one source: the config's.

- a parameter's completeness over the report = its points / its expected points, over the days;
- stale: no point in the last `stale_after` before the report's end (its `--to`, or the end of what the
  dataset holds);
- flatlines: parameter-days whose longest run of one value lasts `flatline_after` or more (signal
  parameters hold a value by nature and are left out);
- below: parameters whose completeness is under `fail_under` (`etl report --fail-under`, exit 9);
- late: parameters whose points reached the platform after a run had read past their stamps, by how
  late the latest of them came (at least);
- verify: the last `etl verify` of the source (etl/dataset/verified.py), when and what it found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

import duckdb

from etl.config import Config
from etl.dataset import verified
from etl.dataset.query import connect
from etl.errors import NothingToRead
from etl.model import QUALITY
from etl.sinks.output import Output
from etl.timeutil import DAY_MS, HOUR_MS, duration_text, iso, now_ms

HEATMAP_ROWS = 100
DEFAULT_DAYS = 7
Row = dict[str, Any]  # a row of DuckDB's answer by column name (JSON-ready once through `_plain`)


@dataclass(frozen=True)
class ReportOptions:
    start: int | None = None  # epoch ms; default: DEFAULT_DAYS days before the end
    end: int | None = None  # default: the end of what the dataset holds
    stale_after: int = 3 * HOUR_MS
    flatline_after: int = 2 * HOUR_MS
    fail_under: float | None = None
    top: int = 20


class OptionsRecord(TypedDict):
    stale_after_seconds: float
    flatline_after_seconds: float
    fail_under: float | None
    top: int


class VerifySeen(TypedDict):
    """What the report says of the last `etl verify`."""

    finished: str | None
    status: str
    verdict: str


# `Report` in its JSON form (`etl report --json`); "from" is a keyword, so the functional form.
ReportRecord = TypedDict(
    "ReportRecord",
    {
        "source": str,
        "from": str,
        "to": str,
        "days": list[str],
        "generated": str,
        "options": OptionsRecord,
        "parameters": int,
        "parameter_days": int,
        "points": int,
        "expected_points": int,
        "completeness": float | None,
        "worst": list[Row],
        "stale": list[Row],
        "stale_count": int,
        "flatlines": list[Row],
        "flatline_count": int,
        "below": list[Row],
        "below_count": int,
        "late": list[Row],
        "late_count": int,
        "late_points": int,
        "heatmap": list[Row],
        "verify": VerifySeen | None,
    },
)


@dataclass
class Report:
    source: str
    start: int  # the report's window [start, end), epoch ms; it covers the UTC days it touches
    end: int
    days: list[str]
    options: ReportOptions
    parameters: int = 0
    parameter_days: int = 0
    points: int = 0
    expected_points: int = 0
    completeness: float | None = None
    worst: list[Row] = field(default_factory=list)  # the `top` least complete parameters
    heatmap: list[Row] = field(default_factory=list)  # the HEATMAP_ROWS least complete, with `daily`
    stale: list[Row] = field(default_factory=list)
    stale_count: int = 0
    flatlines: list[Row] = field(default_factory=list)
    flatline_count: int = 0
    below: list[Row] = field(default_factory=list)
    below_count: int = 0
    late: list[Row] = field(default_factory=list)  # the parameters whose points came latest
    late_count: int = 0  # parameters with points that reached the platform late
    late_points: int = 0
    verify: VerifySeen | None = None  # the last etl verify of the source
    generated: int = field(default_factory=now_ms)

    def as_dict(self) -> ReportRecord:
        options = self.options
        return {
            "source": self.source,
            "from": iso(self.start),
            "to": iso(self.end),
            "days": self.days,
            "generated": iso(self.generated),
            "options": {
                "stale_after_seconds": options.stale_after / 1000,
                "flatline_after_seconds": options.flatline_after / 1000,
                "fail_under": options.fail_under,
                "top": options.top,
            },
            "parameters": self.parameters,
            "parameter_days": self.parameter_days,
            "points": self.points,
            "expected_points": self.expected_points,
            "completeness": self.completeness,
            "worst": self.worst,
            "stale": self.stale,
            "stale_count": self.stale_count,
            "flatlines": self.flatlines,
            "flatline_count": self.flatline_count,
            "below": self.below,
            "below_count": self.below_count,
            "late": self.late,
            "late_count": self.late_count,
            "late_points": self.late_points,
            "heatmap": self.heatmap,
            "verify": self.verify,
        }


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).date().isoformat()


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, ...]:
    return con.sql(sql).fetchall()[0]


def _rows(relation: duckdb.DuckDBPyRelation) -> list[Row]:
    names = relation.columns
    return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]


def _plain(row: Row) -> Row:
    """JSON-ready: timestamps as ISO 8601 UTC, dates as text."""
    out = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            value = iso(int(value.timestamp() * 1000))
        elif hasattr(value, "isoformat"):
            value = value.isoformat()
        out[key] = value
    return out


def build(config: Config, options: ReportOptions) -> Report:
    con = connect(config)
    views = {r[0] for r in con.sql("select view_name from duckdb_views() where not internal").fetchall()}
    if not views:
        raise NothingToRead(f"no output yet in {config.sink.path}: 'etl run' writes it")
    if QUALITY not in views:
        raise NothingToRead(
            f"no quality dataset in {config.sink.path}: 'etl run' keeps it for the raw series"
        )
    named = f"{QUALITY}_named" in views
    source = config.source.name
    names = (
        "" if named else "null::varchar as object_name, null::varchar as param_name, null::varchar as unit, "
    )
    con.sql(
        f"create temp view mine as select {names}* from {QUALITY}{'_named' if named else ''} "
        f"where source = '{source}'"
    )  # a source name is letters, digits, '.', '_' and '-' (config)
    end = options.end
    if end is None:
        end = _one(
            con, "select max(epoch_ms(date::timestamp) + cast(span_seconds * 1000 as bigint)) from mine"
        )[0]
        if end is None:
            raise NothingToRead(
                f"no quality rows of source {source} in {config.sink.path}: 'etl run' keeps them"
            )
    start = options.start
    if start is None:  # the last DEFAULT_DAYS days the dataset holds
        first = _one(con, "select min(epoch_ms(date::timestamp)) from mine")[0] or 0
        start = max(first, (end - 1) // DAY_MS * DAY_MS - (DEFAULT_DAYS - 1) * DAY_MS)
    if start >= end:
        raise NothingToRead(f"the report's window is empty: {iso(start)} is not before {iso(end)}")
    first_day, last_day = start // DAY_MS, (end - 1) // DAY_MS
    days = [_day(d * DAY_MS) for d in range(first_day, last_day + 1)]
    con.sql(
        f"create temp view rows_ as select * from mine where date between DATE '{days[0]}' and DATE '{days[-1]}'"
    )

    report = Report(source, start, end, days, options)
    last = verified.last(Output(config), source)
    if last is not None:
        report.verify = {
            "finished": last.get("finished"),
            "status": str(last.get("status")),
            "verdict": str(last.get("verdict")),
        }
    con.sql("""
        create temp view per_param as select object_id, any_value(object_name) as object_name, param_id, any_value(param_name) as param_name,
               any_value(unit) as unit, any_value(kind) as kind, count(*) as days, sum(points) as points,
               sum(expected_points) as expected_points,
               case when sum(expected_points) > 0 then least(1.0, sum(points) / sum(expected_points))
                    when sum(points) = 0 then 0.0 end as completeness,
               max(longest_gap_seconds) as longest_gap_seconds, max(flatline_seconds) as flatline_seconds,
               max(last_ts) as last_ts, median(period_seconds) as period_seconds,
               sum(late_points) as late_points, max(late_seconds) as late_seconds,
               count(*) filter (where late_points > 0) as late_days
        from rows_ group by object_id, param_id
    """)
    totals = _one(
        con,
        "select count(*), coalesce(sum(days), 0), coalesce(sum(points), 0), "
        "coalesce(sum(expected_points), 0) from per_param",
    )
    report.parameters, report.parameter_days, report.points, report.expected_points = (int(v) for v in totals)
    if report.expected_points:
        report.completeness = min(1.0, report.points / report.expected_points)
    elif report.parameters:
        report.completeness = 0.0 if not report.points else None
    order = "order by completeness asc nulls last, longest_gap_seconds desc, object_id, param_id"
    report.worst = [
        _plain(r) for r in _rows(con.sql(f"select * from per_param {order} limit {int(options.top)}"))
    ]

    heat = _rows(con.sql(f"select * from per_param {order} limit {HEATMAP_ROWS}"))
    if heat:
        ids = ", ".join(str(int(r["param_id"])) for r in heat)
        daily: dict[int, dict[str, Row]] = {}
        for r in _rows(
            con.sql(
                f"select param_id, date, points, expected_points, completeness, longest_gap_seconds "
                f"from rows_ where param_id in ({ids})"
            )
        ):
            daily.setdefault(int(r["param_id"]), {})[r["date"].isoformat()] = _plain(r)
        for r in heat:
            cells = daily.get(int(r["param_id"]), {})
            report.heatmap.append({**_plain(r), "daily": [cells.get(day) for day in days]})

    stale_ms = int(options.stale_after)
    stale = f"last_ts is null or epoch_ms(last_ts) < {int(end) - stale_ms}"
    report.stale_count = _one(con, f"select count(*) from per_param where {stale}")[0]
    report.stale = [
        _plain(
            {
                **r,
                "silent_seconds": None
                if r["last_ts"] is None
                else (end - int(r["last_ts"].timestamp() * 1000)) / 1000,
            }
        )
        for r in _rows(
            con.sql(
                f"select * from per_param where {stale} "
                f"order by last_ts asc nulls first, object_id, param_id "
                f"limit {int(options.top)}"
            )
        )
    ]

    flat = f"flatline_seconds >= {options.flatline_after / 1000} and kind is distinct from 'signal'"
    report.flatline_count = _one(con, f"select count(*) from rows_ where {flat}")[0]
    report.flatlines = [
        _plain(r)
        for r in _rows(
            con.sql(
                f"select object_id, object_name, param_id, param_name, unit, kind, date, flatline_seconds, points "
                f"from rows_ where {flat} order by flatline_seconds desc, object_id, param_id, date "
                f"limit {int(options.top)}"
            )
        )
    ]

    report.late_count, report.late_points = (
        int(v or 0)
        for v in _one(con, "select count(*), sum(late_points) from per_param where late_points > 0")
    )
    report.late = [
        _plain(r)
        for r in _rows(
            con.sql(
                "select * from per_param where late_points > 0 "
                f"order by late_seconds desc, late_points desc, object_id, param_id limit {int(options.top)}"
            )
        )
    ]

    if options.fail_under is not None:
        below = f"completeness < {float(options.fail_under)}"
        report.below_count = _one(con, f"select count(*) from per_param where {below}")[0]
        report.below = [
            _plain(r)
            for r in _rows(con.sql(f"select * from per_param where {below} {order} limit {int(options.top)}"))
        ]
    return report


# -- text ------------------------------------------------------------------------------------------------


def percent(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def label(row: Row) -> str:
    """'obj-1 / temperature-1001 [°C]', or the ids when the dimension tables are missing."""
    obj = row.get("object_name") or f"object {row['object_id']}"
    param = row.get("param_name") or f"param {row['param_id']}"
    unit = row.get("unit")
    return f"{obj} / {param}" + (f" [{unit}]" if unit else "")


def text(report: Report) -> str:
    options = report.options
    lines = [
        f"quality of {report.source}'s raw series, {report.days[0]} .. {report.days[-1]} "
        f"({len(report.days)} day{'s' if len(report.days) > 1 else ''})",
        f"  parameters  {report.parameters}    parameter-days {report.parameter_days}    "
        f"points {report.points:,} of {report.expected_points:,} expected ({percent(report.completeness)})",
        f"  stale       {report.stale_count} (no point in the {duration_text(options.stale_after / 1000)} before "
        f"{iso(report.end)})    flatlines {report.flatline_count} (one value for "
        f"{duration_text(options.flatline_after / 1000)} or more)",
        f"  late        {report.late_points:,} point(s) of {report.late_count} parameter(s) reached the platform "
        "after a run had read past them",
    ]
    if options.fail_under is not None:
        lines.append(
            f"  below       {report.below_count} parameter(s) under {percent(options.fail_under)} complete"
        )
    if report.verify is not None:
        lines.append(f"  verified    {report.verify['finished']}: {report.verify['verdict']}")
    lines.append("")
    lines.append(f"least complete parameters (of {report.parameters}):")
    lines.extend(
        _table(
            report.worst,
            [
                ("parameter", label),
                ("id", lambda r: str(r["param_id"])),
                ("kind", lambda r: r["kind"] or ""),
                ("complete", lambda r: percent(r["completeness"])),
                ("points", lambda r: f"{r['points']:,}/{r['expected_points'] or 0:,}"),
                ("longest gap", lambda r: duration_text(r["longest_gap_seconds"])),
                ("last point", lambda r: r["last_ts"] or ""),
            ],
        )
    )
    if report.stale:
        lines.append("")
        lines.append(f"stale parameters ({report.stale_count}):")
        lines.extend(
            _table(
                report.stale,
                [
                    ("parameter", label),
                    ("id", lambda r: str(r["param_id"])),
                    ("silent for", lambda r: duration_text(r["silent_seconds"]) or "the whole span"),
                    ("last point", lambda r: r["last_ts"] or "none"),
                ],
            )
        )
    if report.late:
        lines.append("")
        lines.append(f"late parameters ({report.late_count}), latest first:")
        lines.extend(
            _table(
                report.late,
                [
                    ("parameter", label),
                    ("id", lambda r: str(r["param_id"])),
                    ("late points", lambda r: f"{r['late_points']:,}"),
                    ("days", lambda r: str(r["late_days"])),
                    ("the latest at least", lambda r: duration_text(r["late_seconds"])),
                ],
            )
        )
    if report.flatlines:
        lines.append("")
        lines.append(f"flatlines ({report.flatline_count}):")
        lines.extend(
            _table(
                report.flatlines,
                [
                    ("parameter", label),
                    ("id", lambda r: str(r["param_id"])),
                    ("date", lambda r: r["date"]),
                    ("one value for", lambda r: duration_text(r["flatline_seconds"])),
                ],
            )
        )
    return "\n".join(lines)


def _table(rows: list[Row], columns: list[tuple[str, Callable[[Row], str]]]) -> list[str]:
    if not rows:
        return ["  (none)"]
    cells = [[get(r) for _, get in columns] for r in rows]
    widths = [max(len(name), *(len(c[i]) for c in cells)) for i, (name, _) in enumerate(columns)]
    out = ["  " + "  ".join(name.ljust(w) for (name, _), w in zip(columns, widths, strict=True)).rstrip()]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return out
