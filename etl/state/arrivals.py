"""What arrived, beside what was asked (coverage.py): the state that follows the data, not the clock.

- `newest`: per (parameter, series), the stamp of the newest row received. A run reads a parameter
  again from there, not from its checkpoint, so points that reach the platform late are fetched
  (etl/pipeline/late.py).
- `late`: per (parameter, UTC day), the points that arrived after a run had read past their stamps,
  and the longest such delay, for the quality dataset.
- `prints`: per (parameter, block of time), a fingerprint of the platform's 30-minute averages up to a
  cut-off, which tells a later run whether values it read were revised since; a parameter's prints are
  replaced as a whole by the next run that takes them.

Held column-wise. `newest` has a row per (parameter, series); `late` and `prints` rows are kept only for
the days a late or revised point can still reach (`prune`), so the state is sized by the fleet, not by
history.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from etl.model import Series
from etl.state.coverage import NONE, key_of, parquet_bytes

_EMPTY = np.empty(0, np.int64)
Fold = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (values sorted by key, group heads) -> one each


def _last(values: np.ndarray, heads: np.ndarray) -> np.ndarray:
    last: np.ndarray = values[np.r_[heads[1:], len(values)] - 1]
    return last


@dataclass(frozen=True)
class Rows:
    """Rows keyed by (param_id, at), sorted, each key once, with int64 value columns."""

    param_id: np.ndarray
    at: np.ndarray
    values: tuple[np.ndarray, ...]

    @classmethod
    def empty(cls, width: int) -> Rows:
        return cls(_EMPTY, _EMPTY, (_EMPTY,) * width)

    def __len__(self) -> int:
        return len(self.param_id)

    def merged(self, other: Rows, folds: tuple[Fold, ...]) -> Rows:
        """Both sets of rows, each key's rows folded (`other`'s after `self`'s, for folds that keep the last)."""
        param_id, at = np.r_[self.param_id, other.param_id], np.r_[self.at, other.at]
        values = [np.r_[a, b] for a, b in zip(self.values, other.values, strict=True)]
        if not len(param_id):
            return self
        order = np.lexsort((at, param_id))  # stable: a key's rows stay in the order given
        param_id, at = param_id[order], at[order]
        heads = np.flatnonzero(np.r_[True, (param_id[1:] != param_id[:-1]) | (at[1:] != at[:-1])])
        return Rows(
            param_id[heads],
            at[heads],
            tuple(fold(v[order], heads) for fold, v in zip(folds, values, strict=True)),
        )

    def take(self, mask: np.ndarray) -> Rows:
        return Rows(self.param_id[mask], self.at[mask], tuple(v[mask] for v in self.values))

    def of(self, param_ids: np.ndarray) -> Rows:
        """The rows of these parameters."""
        return self.take(np.isin(self.param_id, param_ids))

    def as_lists(self) -> list[list[int]]:
        return [self.param_id.tolist(), self.at.tolist(), *(v.tolist() for v in self.values)]

    @classmethod
    def from_lists(cls, lists: list[list[int]], width: int) -> Rows:
        if len(lists) != 2 + width:
            raise ValueError(f"expected {2 + width} columns, got {len(lists)}")
        p, at, *values = (np.array(c, np.int64) for c in lists)
        if any(len(c) != len(p) for c in (at, *values)):
            raise ValueError("columns of different lengths")
        return cls(p, at, tuple(values))


# late: (param_id, day) -> (points, longest delay in ms); prints: (param_id, block) -> (cutoff, hash)
LATE_FOLDS: tuple[Fold, ...] = (np.add.reduceat, np.maximum.reduceat)
PRINT_FOLDS: tuple[Fold, ...] = (_last, _last)


class Arrivals:
    """Per (parameter, series) the newest stamp received; per parameter the late and print rows."""

    __slots__ = ("key", "newest", "late", "prints")

    def __init__(self) -> None:
        self.key, self.newest = _EMPTY, _EMPTY
        self.late = Rows.empty(2)
        self.prints = Rows.empty(2)

    def __bool__(self) -> bool:
        return bool(len(self.key) or len(self.late) or len(self.prints))

    def add_newest(self, key: np.ndarray, newest: np.ndarray) -> None:
        """Stamps received (keys from `coverage.key_of`): each key keeps its newest."""
        if not len(key):
            return
        keys = np.r_[self.key, np.asarray(key, np.int64)]
        stamps = np.r_[self.newest, np.asarray(newest, np.int64)]
        order = np.lexsort((stamps, keys))
        keys, stamps = keys[order], stamps[order]
        last = np.r_[keys[1:] != keys[:-1], True]
        self.key, self.newest = keys[last], stamps[last]

    def add_late(self, rows: Rows) -> None:
        self.late = self.late.merged(rows, LATE_FOLDS)

    def add_prints(self, rows: Rows) -> None:
        """A parameter's prints replace all it had: each run prints the whole span it compares."""
        kept = self.prints.take(~np.isin(self.prints.param_id, rows.param_id))
        self.prints = kept.merged(rows, PRINT_FOLDS)

    def merge(self, other: Arrivals) -> None:
        self.add_newest(other.key, other.newest)
        self.add_late(other.late)
        self.add_prints(other.prints)

    def newest_of(self, series: Series, param_ids: np.ndarray) -> np.ndarray:
        """The newest stamp received of each parameter's series (NONE: nothing yet)."""
        wanted = key_of(param_ids, series)
        if not len(self.key):
            return np.full(len(wanted), NONE, np.int64)
        at = np.minimum(np.searchsorted(self.key, wanted), len(self.key) - 1)
        return np.where(self.key[at] == wanted, self.newest[at], NONE)

    def forget(self, param_ids: set[int] | None = None, series: set[str] | None = None) -> None:
        """What a state reset forgets: the newest stamps of these parameters and series (None: all),
        and, with the raw series, their late and print rows."""
        doomed = np.ones(len(self.key), bool)
        if param_ids is not None:
            doomed &= np.isin(self.key // 4, list(param_ids))
        if series is not None:
            codes = [int(key_of(np.zeros(1, np.int64), Series(s))[0]) for s in series]
            doomed &= np.isin(self.key % 4, codes)
        self.key, self.newest = self.key[~doomed], self.newest[~doomed]
        if series is None or Series.RAW.value in series:
            if param_ids is None:
                self.late, self.prints = Rows.empty(2), Rows.empty(2)
            else:
                ids = list(param_ids)
                self.late = self.late.take(~np.isin(self.late.param_id, ids))
                self.prints = self.prints.take(~np.isin(self.prints.param_id, ids))

    def prune(self, before: int) -> None:
        """Forget late and print rows of times before `before`: no late point can reach them any more."""
        self.late = self.late.take(self.late.at >= before)
        self.prints = self.prints.take(self.prints.at >= before)

    # -- on disk ---------------------------------------------------------------------------------------

    def segment(self) -> dict[str, list[list[int]]]:
        """The JSON form, for a checkpoint log segment (keys only where there is something)."""
        body: dict[str, list[list[int]]] = {}
        if len(self.key):
            body["newest"] = [self.key.tolist(), self.newest.tolist()]
        if len(self.late):
            body["late"] = self.late.as_lists()
        if len(self.prints):
            body["prints"] = self.prints.as_lists()
        return body

    @classmethod
    def from_segment(cls, body: dict[str, Any]) -> Arrivals:
        out = cls()
        if (newest := body.get("newest")) is not None:
            keys, stamps = (np.array(c, np.int64) for c in newest)
            if len(keys) != len(stamps):
                raise ValueError("newest: columns of different lengths")
            out.add_newest(keys, stamps)
        if (late := body.get("late")) is not None:
            out.add_late(Rows.from_lists(late, 2))
        if (prints := body.get("prints")) is not None:
            out.add_prints(Rows.from_lists(prints, 2))
        return out

    def to_parquet(self) -> bytes:
        """The three tables in one file, told apart by `table` (0 newest, 1 late, 2 prints)."""
        parts = [
            (
                0,
                self.key,
                np.zeros(len(self.key), np.int64),
                (self.newest, np.zeros(len(self.key), np.int64)),
            ),
            (1, self.late.param_id, self.late.at, self.late.values),
            (2, self.prints.param_id, self.prints.at, self.prints.values),
        ]
        table = pa.table(
            {
                "table": np.concatenate([np.full(len(p), t, np.int8) for t, p, _, _ in parts]),
                "id": np.concatenate([p for _, p, _, _ in parts]),
                "at": np.concatenate([a for _, _, a, _ in parts]),
                "a": np.concatenate([v[0] for _, _, _, v in parts]),
                "b": np.concatenate([v[1] for _, _, _, v in parts]),
            }
        )
        return parquet_bytes(table)

    @classmethod
    def from_parquet(cls, data: bytes) -> Arrivals:
        table = pq.read_table(io.BytesIO(data))
        t, ident, at, a, b = (table.column(n).to_numpy() for n in ("table", "id", "at", "a", "b"))
        out = cls()
        out.add_newest(ident[t == 0], a[t == 0])
        out.add_late(Rows(ident[t == 1], at[t == 1], (a[t == 1], b[t == 1])))
        out.add_prints(Rows(ident[t == 2], at[t == 2], (a[t == 2], b[t == 2])))
        return out
