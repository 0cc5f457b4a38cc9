"""The `quality` view of `etl query` (and of `etl report`, `etl.read`) over the quality dataset."""

from __future__ import annotations

import duckdb

_VIEW = """
create view quality as
with typed as (
    select cast(source as varchar) as source, cast(object_id as bigint) as object_id,
           cast(param_id as bigint) as param_id, cast(kind as varchar) as kind, cast(date as date) as date,
           cast(points as bigint) as points, cast(expected_points as bigint) as expected_points,
           cast(completeness as double) as completeness, cast(longest_gap_seconds as double) as longest_gap_seconds,
           cast(flatline_seconds as double) as flatline_seconds, cast(first_ts as timestamptz) as first_ts,
           cast(last_ts as timestamptz) as last_ts, cast(period_seconds as double) as period_seconds,
           cast(span_seconds as double) as span_seconds, cast({late_points} as bigint) as late_points,
           cast({late_seconds} as double) as late_seconds
    from {relation}
), carried as (
    select *, coalesce(period_seconds,
        last_value(period_seconds ignore nulls) over (partition by source, param_id order by date
                                                      rows between unbounded preceding and 1 preceding),
        first_value(period_seconds ignore nulls) over (partition by source, param_id order by date
                                                       rows between 1 following and unbounded following)
    ) as period
    from typed
)
select source, object_id, param_id, kind, date, points,
       coalesce(expected_points, cast(round(span_seconds / period) as bigint)) as expected_points,
       coalesce(completeness, case when points = 0 then 0.0
                                   when round(span_seconds / period) >= 1
                                   then least(1.0, points / round(span_seconds / period))
                                   when period is not null then 1.0 end) as completeness,
       longest_gap_seconds, flatline_seconds, first_ts, last_ts, period as period_seconds,
       period_seconds is null and period is not null as period_carried, span_seconds,
       coalesce(late_points, 0) as late_points, late_seconds
from carried
"""


def create_quality_view(con: duckdb.DuckDBPyConnection, relation: str) -> None:
    """The `quality` view of `etl query` over a DuckDB relation of the dataset's files: typed columns
        (CSV too), `date` from the partition, and for days whose period could not be inferred (fewer than 2
        points) the period of the parameter's nearest earlier day that has one (else the nearest later one),
        which fills their expected_points and completeness (`period_carried` says so); the late points of a
    day (0 in files written before they were counted)."""
    have = set(con.sql(f"select * from {relation} limit 0").columns)
    # Files written before the late figures were kept have none of them.
    late = {name: name if name in have else "null" for name in ("late_points", "late_seconds")}
    con.sql(_VIEW.format(relation=relation, **late))
