"""A schedule as cron runs it against a live platform: a first run over a day, then hourly runs with
`end: now`, the emulator's clock moved one hour before each; points that reach the platform late
(etl_emulator/lateness.py), and what the output must hold at the end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from etl.config import Config, parse_config
from etl.errors import EtlError
from etl.pipeline.plan import horizon
from etl.pipeline.summary import RunSummary
from etl.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, to_ms
from etl_emulator.config import EmulatorConfig
from etl_emulator.lateness import Lateness
from etl_emulator.server import RunningEmulator
from tests.support.configs import config_dict
from tests.support.emulator import emulator_config
from tests.support.expected import SERIES, expected_table
from tests.support.output import read
from tests.support.pipeline import run

START = "2026-11-10T00:00:00Z"
T0 = to_ms(START)
FIRST_RUN = T0 + DAY_MS + 7 * MINUTE_MS  # the first run: the day before it, at 00:07 the next day


def mixed_lateness() -> Lateness:
    """On the test fleet (tests/support/emulator.py: objects 1 and 2, params x001-x003 and x501):
    1001 three hours late; calculated 1501 two hours late and revised four hours after its stamps;
    2501 revised after three hours; object 2's first controller (21: 2001 and 2003) offline from 06:00
    to 20:00 on the second day, its backlog uploaded at 20:00."""
    return Lateness(
        lag={1001: 3 * HOUR_MS, 1501: 2 * HOUR_MS},
        offline=[(21, T0 + DAY_MS + 6 * HOUR_MS, T0 + DAY_MS + 20 * HOUR_MS)],
        revise={1501: 4 * HOUR_MS, 2501: 3 * HOUR_MS},
    )


def late_emulator(lateness: Lateness | None = None, **overrides: Any) -> EmulatorConfig:
    return emulator_config(
        now_ms=FIRST_RUN, lateness=lateness if lateness is not None else mixed_lateness(), **overrides
    )


@dataclass
class Schedule:
    """What a schedule did: each run's summary (or error), the requests and bytes the server sent."""

    summaries: list[RunSummary]
    requests: int
    bytes: int
    last_end: int  # where the last run's window ended (the server's clock, less the horizon's margin)


def config_data(
    emulator: RunningEmulator, out: Path, fmt: str = "parquet", **sections: Any
) -> dict[str, Any]:
    """The schedule's config as YAML would hold it: from START to now, into `out` as `fmt`."""
    return config_dict(
        emulator.base_url,
        out,
        window={"start": START, "end": "now", "overlap": "0s", **sections.pop("window", {})},
        sink={"format": fmt, "path": str(out), **sections.pop("sink", {})},
        **sections,
    )


def config_for(emulator: RunningEmulator, out: Path, fmt: str = "parquet", **sections: Any) -> Config:
    return parse_config(config_data(emulator, out, fmt, **sections))


def run_schedule(
    emulator: RunningEmulator,
    config: Config,
    hours: int,
    between: Callable[[int], None] | None = None,
    first: int = FIRST_RUN,
) -> Schedule:
    """A first run at `first`, then `hours` hourly runs, the clock moved an hour before each;
    `between(i)` is called before run i (to kill, to change faults)."""
    summaries: list[RunSummary] = []
    requests = size = 0
    clock = first
    for i in range(hours + 1):
        emulator.set_clock(clock)
        emulator.clear_requests()
        if between is not None:
            between(i)
        try:
            summaries.append(run(config))
        except EtlError as exc:
            assert exc.summary is not None
            summaries.append(exc.summary)
        log = emulator.requests()
        requests += sum(1 for r in log if "/db/" in r["path"])
        size += sum(int(r.get("bytes") or 0) for r in log if "/db/" in r["path"])
        clock += HOUR_MS
    return Schedule(summaries, requests, size, horizon(clock - HOUR_MS))


def expected(emulator_config: EmulatorConfig, series: str, end: int) -> pa.Table:
    """What the platform serves at the schedule's last clock, from START to `end`."""
    return expected_table(emulator_config, series, T0, end)


def assert_exact(out: Path, config: EmulatorConfig, end: int, fmt: str = "parquet") -> None:
    for name in SERIES:
        got = read(out, name, fmt) if fmt != "parquet" else read(out, name)
        want = expected(config, name, end)
        got = got.select(want.column_names).sort_by([("param_id", "ascending"), ("ts", "ascending")])
        assert got.num_rows == want.num_rows, (name, got.num_rows, want.num_rows)
        assert got.equals(want), name
