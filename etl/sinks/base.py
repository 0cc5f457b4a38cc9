"""The seam between a slab and where its rows go: a `SlabSink` is fed a slab's batches in write order
and makes them visible at once when the slab ends (or not at all), saying what it did in a `SlabOutcome`.

Implemented by `etl.sinks.files.SlabWriter` (bucket files of a Parquet/CSV dataset),
`etl.quality.writer.QualitySlabWriter` (a raw slab's files and its quality rows) and
`etl.sinks.lake.writer.LakeSlabWriter` (one table commit carrying the slab's checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from etl.model import Windows
from etl.sinks.layout import Layout
from etl.sinks.rewrite import Ranges


@dataclass(frozen=True)
class SlabOutcome:
    """What a finished slab left behind; the coordinator checkpoints the slab from it."""

    points: int = 0
    files: list[str] = field(default_factory=list)  # data files that hold the slab's rows now
    quality_rows: int = 0  # (parameter, day) rows written to the quality dataset (raw slabs)
    lowest_completeness: float | None = None  # among them
    commit: tuple[str, int] | None = None  # lake tables: (table, version) of the commit holding the slab


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
