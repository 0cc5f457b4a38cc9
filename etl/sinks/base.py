"""The seam between a slab and where its rows go: a `SlabSink` is fed a slab's batches in write order
and makes them visible at once when the slab ends (or not at all), saying what it did in a `SlabOutcome`.

Implemented by `etl.sinks.hive.SlabWriter` (bucket files of a Parquet/CSV dataset),
`etl.quality.writer.QualitySlabWriter` (a raw slab's files and its quality rows) and
`etl.sinks.lake.writer.LakeSlabWriter` (a lake slab's rows staged for the run's committer, which commits
them with other slabs' in one table commit carrying their checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from etl.model import Windows
from etl.sinks.layout import Layout
from etl.sinks.rewrite import Ranges
from etl.state.arrivals import Rows


@dataclass(frozen=True)
class Staged:
    """A lake slab's rows, ready but not visible: the run's committer (etl/sinks/lake/committer.py)
    commits them with other slabs' of the same table, and only then is the slab checkpointed.
    Picklable: a Dask worker hands it back to the coordinator."""

    table: str  # the series table
    windows: Windows  # the slab's windows whose rows these are (all of them: none failed)
    points: int = 0
    spool: str | None = None  # an Arrow IPC file of the rows, on the coordinator's machine
    files: tuple[Any, ...] = ()  # or data files a worker wrote into the table (the format's own records)
    nbytes: int = 0  # the rows' size, for grouping
    quality: pa.Table | None = None  # a raw slab's quality rows (one per parameter-day)...
    quality_days: Windows | None = None  # ...and the (parameter, day) windows they replace


@dataclass(frozen=True)
class SlabOutcome:
    """What a finished slab left behind; the coordinator checkpoints the slab from it."""

    points: int = 0
    files: list[str] = field(default_factory=list)  # data files that hold the slab's rows now
    quality_rows: int = 0  # (parameter, day) rows written to the quality dataset (raw slabs)
    lowest_completeness: float | None = None  # among them
    staged: Staged | None = None  # lake tables: the rows, for the run's committer
    late: Rows | None = None  # raw slabs: the points that came late, per (parameter, day)


class SlabSink(Protocol):
    """Where one slab's rows go."""

    @property
    def layout(self) -> Layout: ...

    def write(self, table: pa.Table, windows: Windows) -> None:
        """The rows of fetched windows (sorted in write order) and the windows (rows may be none)."""

    def finish(self) -> SlabOutcome:
        """Make every row written visible at once; nothing is visible before."""

    def abort(self) -> None:
        """Forget what was written (nothing of it becomes visible)."""


class QualityRows(Protocol):
    """Makes a raw slab's quality rows from every raw row of its parameter-days (etl.quality.writer's
    QualityTracker); a sink calls it with each group of rows and the ranges they replace."""

    def __call__(self, rows: pa.Table, ranges: Ranges) -> None: ...

    def result(self, by_object: bool) -> tuple[pa.Table, Windows]:
        """The rows in write order, and the (parameter, day) windows they replace."""
        ...

    @property
    def rows(self) -> int: ...

    @property
    def lowest_completeness(self) -> float | None: ...

    def late(self) -> Rows:
        """The points that came late, per (parameter, day)."""
        ...
