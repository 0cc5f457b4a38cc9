"""A window end in the future: checkpoints never run ahead of the server's clock (issue 21)."""

from __future__ import annotations

import logging

import numpy as np

from etl.pipeline.plan import HORIZON_MARGIN_MS
from etl.timeutil import DAY_MS, HOUR_MS, iso, to_ms
from tests.support.configs import make_config
from tests.support.emulator import NOW, emulator_config
from tests.support.expected import SERIES, SOURCE, expected_table
from tests.support.output import checkpoints, read
from tests.support.pipeline import run

START = "2026-11-19T00:00:00Z"
END = "2026-11-21T00:00:00Z"  # a day after the emulator's clock (NOW)


def at_the_server_clock(stamp: str) -> bool:
    """The end a run took: the server's clock at its sign-in, less the margin (whole seconds; the clock is
    fixed, ours moved on by the moment the end was taken, a stalled machine's by a few seconds)."""
    return 0 <= to_ms(stamp) - (to_ms(NOW) - HORIZON_MARGIN_MS) <= 5000


def assert_exact(out, now: int) -> None:
    for name in SERIES:
        got = read(out, name)
        want = expected_table(emulator_config(now_ms=now), name, to_ms(START), to_ms(END))
        assert got.num_rows == want.num_rows > 0, name
        assert got.select(want.column_names).equals(want), name


def test_a_future_end_is_covered_up_to_the_server_clock_and_the_next_run_gets_the_rest(
    fresh_emulator, tmp_path, caplog
):
    config = make_config(fresh_emulator.base_url, tmp_path, window={"start": START, "end": END})
    with caplog.at_level(logging.WARNING, logger="etl"):
        first = run(config).as_dict()
    end = first["window"]["end"]
    assert first["window"]["start"] == iso(to_ms(START)) and at_the_server_clock(end)
    said = [r.getMessage() for r in caplog.records if "in the future" in r.getMessage()]
    assert len(said) == 1 and f"fetching up to {end}" in said[0], said
    coverage = checkpoints(tmp_path)
    assert len(coverage) and int(coverage.end.max()) == to_ms(end)  # never past what the server had

    # The platform moves on; the next run fetches every point it now has, exactly once.
    later = to_ms(NOW) + DAY_MS + 12 * HOUR_MS
    fresh_emulator.set_clock(later)
    second = run(config).as_dict()
    assert second["window"]["end"] == iso(to_ms(END)) and second["series"]["raw"]["points"] > 0
    assert int(checkpoints(tmp_path).end.max()) == to_ms(END)
    assert_exact(tmp_path, later)


def test_checkpoints_already_past_the_server_clock_are_named_with_the_repair(
    fresh_emulator, tmp_path, caplog
):
    """A state written by an older version with a future end: named in one line, with the command."""
    config = make_config(
        fresh_emulator.base_url, tmp_path, window={"start": START, "end": NOW}, series=["raw"]
    )
    run(config)
    store = checkpoints(tmp_path)
    # As the old code left it: covered up to the future end, though the server had nothing after NOW.
    store.end = np.maximum(store.end, to_ms(END))
    from etl.state import StateStore
    from etl.storage.atomic import Storage

    StateStore(Storage(str(tmp_path / "_state" / SOURCE))).replace(store)
    with caplog.at_level(logging.WARNING, logger="etl"):
        summary = run(config).as_dict()
    said = [r.getMessage() for r in caplog.records if "past the server's clock" in r.getMessage()]
    assert len(said) == 1 and "etl state reset -c CONFIG --from TIME" in said[0], said
    assert summary["warnings"]["checkpoints_past_the_server_clock"] == 8


def test_a_future_to_is_cut_too_and_a_now_end_says_nothing(fresh_emulator, tmp_path, caplog):
    """`etl run --to <future>` (Airflow's data_interval_end) as window.end; window.end "now" is the
    server's now, no warning."""
    config = make_config(
        fresh_emulator.base_url, tmp_path, window={"start": START, "end": "now"}, series=["raw"]
    )
    with caplog.at_level(logging.WARNING, logger="etl"):
        assert at_the_server_clock(run(config).as_dict()["window"]["end"])  # the server's clock, not ours
    assert not [r for r in caplog.records if "in the future" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="etl"):
        summary = run(config, start=START, end=END, full_refresh=True).as_dict()
    assert at_the_server_clock(summary["window"]["end"])
    assert [r for r in caplog.records if "in the future" in r.getMessage()]
