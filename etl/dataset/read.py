"""`etl.read`: one series of a config's output as a pandas DataFrame, whatever the sink's format."""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike
from typing import Literal

import pandas as pd

from etl.config import Config, load_config
from etl.dataset.query import Scope, connect, open_views, views
from etl.errors import ConfigError, NothingToRead
from etl.model import QUALITY, QUALITY_SCHEMA, SCHEMAS, Series
from etl.timeutil import Time, parse_time

NAMES = ("object_name", "param_name", "unit")


def read(
    config: Config | str | PathLike[str],
    series: Literal["raw", "average", "candles", "quality"] = "raw",
    *,
    start: Time | None = None,
    end: Time | None = None,
    params: Iterable[int] | None = None,
    named: bool = False,
) -> pd.DataFrame:
    """The config's source's rows of one series (or of the quality dataset), sorted by parameter and
    time, from any sink format (Parquet, CSV, Delta, Iceberg; local or object storage).

    `start`/`end` keep `ts` in [start, end) (ISO 8601 with an offset, an aware datetime, or epoch seconds,
    ms or us told apart by size; the
    quality dataset is kept by `date`); `params` keeps these parameter ids; `named` adds `object_name`,
    `param_name` and `unit` from the reference tables. `ts` is a timezone-aware UTC column.
    """
    config = config if isinstance(config, Config) else load_config(config, offline=True)
    if series not in (*Series, QUALITY):
        raise ConfigError(f"series {series!r}: use raw, average, candles or quality")
    bounds = []
    for name, bound in (("start", start), ("end", end)):
        try:
            bounds.append(None if bound is None else parse_time(bound))
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    ids = sorted({int(p) for p in params}) if params is not None else None
    needed = {series, "parameters", "objects"} if named else {series}
    con = open_views(config, Scope(frozenset(needed), config.source.name, bounds[0], bounds[1], ids))
    view = f"{series}_named" if named else series
    if view not in views(con):
        if not views(connect(config)):  # not an empty frame: a sink.path elsewhere must not read as "no rows"
            raise NothingToRead(f"no output yet in {config.sink.path}: etl.run writes it")
        return _empty(series, named)
    time = "date" if series == QUALITY else "ts"
    where: list[str] = ["(source = ? or source is null)"]  # older files: no source
    values: list[object] = [config.source.name]
    for bound, op in zip(bounds, (">=", "<"), strict=True):
        if bound is not None:
            cast = "cast(to_timestamp(? / 1000) as date)" if time == "date" else "to_timestamp(? / 1000)"
            where.append(f"{time} {op} {cast}")
            values.append(bound)
    if ids is not None:
        where.append("list_contains(?, param_id)")
        values.append(ids)
    sql = f"select * from {view} where {' and '.join(where)} order by source, param_id, {time}"
    frame = con.execute(sql, values).df()
    return frame.drop(columns=["date"]) if time == "ts" and "date" in frame.columns else frame


def _empty(series: str, named: bool) -> pd.DataFrame:
    schema = QUALITY_SCHEMA if series == QUALITY else SCHEMAS[Series(series)]
    frame: pd.DataFrame = schema.empty_table().to_pandas()
    if named:
        frame = pd.concat([pd.DataFrame({n: pd.Series(dtype="object") for n in NAMES}), frame], axis=1)
    return frame
