"""One window of the output against the same window read again from the source, row for row.

The source's rows are what a run would write now (etl/pipeline/fetch.py and etl/pipeline/clean.py:
[start, end), values present and finite, a stamp once). A stamp the source has and the output lacks is missing; one
the output holds and the source does not, or a stamp the output holds twice, is extra; a stamp in both
whose values differ is changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etl.model import Window
from etl.pipeline.clean import WindowData

EXAMPLES = 3  # of each kind of difference, per window


@dataclass(frozen=True)
class Example:
    ts: int
    source: tuple[float, ...] | None  # None: the source has no row at ts
    output: tuple[float, ...] | None  # None: the output has none


@dataclass
class WindowDiff:
    window: Window
    source_rows: int
    output_rows: int
    missing: int = 0
    extra: int = 0
    changed: int = 0
    examples: dict[str, list[Example]] = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        return bool(self.missing or self.extra or self.changed)


def _values(
    values: dict[str, np.ndarray], columns: tuple[str, ...], at: np.ndarray
) -> list[tuple[float, ...]]:
    return list(zip(*(values[c][at].tolist() for c in columns), strict=True)) if len(at) else []


def compare(source: WindowData, ts: np.ndarray, values: dict[str, np.ndarray]) -> WindowDiff:
    """The window's source rows against the output's (`ts` sorted, `values` by column)."""
    window = source.window
    columns = window.series.value_columns
    first = np.r_[True, ts[1:] != ts[:-1]] if len(ts) else np.empty(0, bool)
    twice = np.flatnonzero(~first)
    once = np.flatnonzero(first)
    out_ts = ts[once]
    pos = np.searchsorted(out_ts, source.ts)
    found = pos < len(out_ts)
    found[found] = out_ts[pos[found]] == source.ts[found]
    back = np.searchsorted(source.ts, out_ts)
    known = back < len(source.ts)
    known[known] = source.ts[back[known]] == out_ts[known]
    same = np.ones(int(found.sum()), bool)
    mine, theirs = once[pos[found]], np.flatnonzero(found)
    for c in columns:
        a, b = source.values[c][theirs], values[c][mine]
        same &= (a == b) | (np.isnan(a) & np.isnan(b))
    missing, extra = np.flatnonzero(~found), np.r_[once[~known], twice]
    changed_src, changed_out = theirs[~same], mine[~same]
    diff = WindowDiff(window, len(source.ts), len(ts), len(missing), len(extra), len(changed_src))
    if diff.differs:
        src = _values(source.values, columns, changed_src[:EXAMPLES])
        out = _values(values, columns, changed_out[:EXAMPLES])
        diff.examples = {
            "missing": [
                Example(int(source.ts[i]), v, None)
                for i, v in zip(
                    missing[:EXAMPLES].tolist(),
                    _values(source.values, columns, missing[:EXAMPLES]),
                    strict=True,
                )
            ],
            "extra": [
                Example(int(ts[i]), None, v)
                for i, v in zip(
                    np.sort(extra)[:EXAMPLES].tolist(),
                    _values(values, columns, np.sort(extra)[:EXAMPLES]),
                    strict=True,
                )
            ],
            "changed": [
                Example(int(source.ts[i]), s, o)
                for i, s, o in zip(changed_src[:EXAMPLES].tolist(), src, out, strict=True)
            ],
        }
    return diff
