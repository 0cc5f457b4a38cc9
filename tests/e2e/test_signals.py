"""Signal parameters as the instance marks them: a server that names the type `paramType` and marks a signal
with `"signal": true` beside a physical type (the emulator's `type_field`/`signal_marker` choices) has its
signals selected by `kinds: [signal]`, fetched from /db/signal, labelled `signal` in the rows, counted by
`etl init`, and left out of the report's flatlines; through the per-object lists and the paged search alike."""

from __future__ import annotations

import asyncio

import pyarrow.compute as pc
import pytest

from etl.dataset.report import ReportOptions, build
from etl.ops.probe import probe
from etl_emulator.faults import Faults
from etl_emulator.server import run_emulator
from tests.support.configs import make_config
from tests.support.emulator import T0, emulator_config
from tests.support.output import read
from tests.support.pipeline import run

FLAGGED = Faults(type_field="paramType", signal_marker="flag")
DAY = "2026-11-02T00:00:00Z"


@pytest.mark.parametrize("objects", [2, 9], ids=["lists", "search"])
def test_flagged_signals_are_signals(tmp_path, objects):
    with run_emulator(emulator_config(objects=objects, faults=FLAGGED)) as emu:
        config = make_config(
            emu.base_url,
            tmp_path,
            series=["raw"],
            window={"end": DAY},
            select={"parameters": {"kinds": ["signal"]}},
        )
        summary = run(config)
        paths = [r["path"] for r in emu.requests()]
    signals = {o * 1000 + 3 for o in range(1, objects + 1)}  # the last physical parameter of each object
    raw = read(tmp_path, "raw")
    assert set(raw.column("param_id").to_pylist()) == signals and summary.parameters == objects
    assert pc.all(pc.equal(raw.column("kind"), "signal")).as_py()
    series = [p for p in paths if any(f"/db/{route}/" in p for route in ("measure", "calcvalue", "signal"))]
    assert series and all("/db/signal/" in p for p in series)
    assert any(p.endswith("/search/params") for p in paths) == (objects > 2)


def test_the_report_leaves_flagged_signals_out_of_flatlines(tmp_path):
    with run_emulator(emulator_config(faults=FLAGGED)) as emu:
        config = make_config(emu.base_url, tmp_path, series=["raw"], window={"end": DAY})
        run(config)
        found = asyncio.run(probe(emu.base_url, "demo", "demo"))
    assert found.parameters == {"physical": 4, "calculated": 2, "signal": 2}
    report = build(config, ReportOptions(start=T0, end=T0 + 86_400_000, flatline_after=60_000))
    assert report.flatlines and all(r["kind"] != "signal" for r in report.flatlines)
