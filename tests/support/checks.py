"""Assertions over a run's output, against the emulator's generator."""

from __future__ import annotations

from pathlib import Path

from etl.state import Coverage
from etl.timeutil import to_ms
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SERIES, expected_table
from tests.support.output import read


def assert_exact(
    root, start: str = START, end: str = END, objects=(1, 2), series=SERIES, settings=None
) -> None:
    """Every point of the source in [start, end), exactly once, nothing else, in every series (a local
    folder or any fsspec URL). `settings`: the emulator's, when not the default emulator_config()."""
    settings = settings or emulator_config()
    for name in series:
        got = read(root, name)
        want = expected_table(settings, name, to_ms(start), to_ms(end), objects)
        assert got.num_rows == want.num_rows > 0, name
        assert got.select(want.column_names).equals(want), name


def assert_output_matches_state(out: Path, state: Coverage) -> None:
    """The files hold exactly the source's points of the checkpointed intervals: nothing more."""
    for series in SERIES:
        want = expected_table(emulator_config(), series, to_ms(START), to_ms(END))
        ts = want["ts"].cast("int64").to_pylist()
        keep = [
            any(s <= t < e for s, e in state.intervals(p, series))
            for p, t in zip(want["param_id"].to_pylist(), ts, strict=True)
        ]
        want = want.filter(keep)
        got = read(out, series) if (out / series).exists() else want.schema.empty_table()
        assert got.select(want.column_names).equals(want), series
