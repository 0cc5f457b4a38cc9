"""`etl compact` and `etl vacuum` over lake tables: every table of the sink, holding the run lock (no run
commits meanwhile). Both only commit new versions or delete files no version younger than the retention
references, so a reader on the current version (or any version inside the retention) keeps working."""

from __future__ import annotations

from dataclasses import dataclass, field

from etl.config import Config
from etl.model import Series
from etl.pipeline.build import Build
from etl.sinks.lake.common import LakeTable


@dataclass
class Maintenance:
    tables: int = 0
    files: dict[str, int] = field(default_factory=dict)  # per table: files rewritten or removed


def _tables(build: Build) -> list[LakeTable]:
    lake = build.lake
    tables = [lake.series(s) for s in Series] + [lake.quality()]
    tables += [lake.dimension(name) for name in lake.dimension_names()]
    return [t for t in tables if t.exists()]


def compact(config: Config) -> Maintenance:
    build = Build(config)
    out = Maintenance()
    with build.state_store().lock():
        for table in _tables(build):
            out.tables += 1
            out.files[table.name] = table.compact()
    return out


def vacuum(config: Config, retain_ms: int) -> Maintenance:
    build = Build(config)
    out = Maintenance()
    with build.state_store().lock():
        for table in _tables(build):
            out.tables += 1
            out.files[table.name] = table.vacuum(retain_ms)
    return out
