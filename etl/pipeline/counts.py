"""What fetching and cleaning windows ran into, counted by name: a slab's counts, added up into the run's
(its summary shows `splits` and `continuations` as figures and the odd points as `warnings`)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Counts:
    requests: int = 0  # series requests sent (a pull reports them; a run's figure is its client's)
    continuations: int = 0  # requests spent on answers that may have been cut
    splits: int = 0  # rests of a window asked in several pieces at once
    gone: int = 0  # windows of parameters whose series answered 404: neither written nor failed
    # Odd points, dropped (etl/pipeline/clean.py): the run summary's warnings.
    points_outside_window: int = 0
    points_without_value: int = 0
    points_not_finite: int = 0
    duplicate_points: int = 0
    conflicting_duplicates: int = 0

    def add(self, other: Counts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def warnings(self) -> dict[str, int]:
        """The odd points of each kind there were, by name."""
        return {name: count for name in ODD_POINTS if (count := getattr(self, name))}


ODD_POINTS = (
    "points_outside_window",
    "points_without_value",
    "points_not_finite",
    "duplicate_points",
    "conflicting_duplicates",
)
