"""etl against a live platform built differently from the emulator (benchmarks/servers/live.py): a first
run over a day, then hourly runs with the clock moved, points that come late, a controller offline, a
value revised, sensors quiet for good or back with their backlog, a site without a controller. The
output must equal, row for row, what the server serves at the last clock (`live_client.expected`); and
`etl init` against it must write a config that runs exactly."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from etl.config import parse_config
from etl.pipeline.summary import RunSummary
from etl.timeutil import DAY_MS, HOUR_MS, MINUTE_MS, iso, to_ms
from tests.support import ROOT
from tests.support.cli import etl_main
from tests.support.configs import config_dict
from tests.support.expected import SERIES
from tests.support.output import read
from tests.support.pipeline import run

sys.path.insert(0, str(ROOT / "benchmarks"))

from servers import live_client, wrk  # noqa: E402

T0 = to_ms("2026-11-10T00:00:00Z")
FIRST_RUN = T0 + DAY_MS + 7 * MINUTE_MS  # the day before it, at 00:07 the next day
HOURS = 2
# Its first object has a calculated parameter: etl checks the search against that object's lists, and
# the two disagree (a test below takes a fleet where they agree).
SIZE = {"objects": 5, "params": 20, "seed": 7}
FLEET = live_client.plan(**SIZE)
BARE = FLEET.objects[-1].id  # a site without a controller
OFFLINE = FLEET.objects[1].controllers[0]  # offline from 18:00 on the first day until after the first run
_OTHERS = [p for p in FLEET.params if p.object_id != BARE and p.controller_id != OFFLINE]
LAGGED, GONE, BACK, GAP = [p.id for p in _OTHERS if p.kind == "physical"][:4]
REVISED = next(p.id for p in _OTHERS if p.kind == "calculated")
BEHAVIOUR = {
    "lag": {str(LAGGED): "3h"},
    "revise": {str(REVISED): "2h"},
    "offline": [[OFFLINE, iso(T0 + 18 * HOUR_MS), iso(FIRST_RUN + 53 * MINUTE_MS)]],
    "quiet": [
        [GONE, iso(T0 + 6 * HOUR_MS), None],  # unplugged for good
        # back before the last run, with its backlog
        [BACK, iso(T0 + 20 * HOUR_MS), iso(FIRST_RUN + 2 * HOUR_MS - 7 * MINUTE_MS), True],
        [GAP, iso(T0 + 10 * HOUR_MS), iso(T0 + 12 * HOUR_MS)],  # two hours never measured
    ],
    "no_controller": [BARE],
}
KEYS = ["object_id", "param_id", "ts"]


@dataclass
class Schedule:
    live: live_client.Live
    out: Path
    summaries: list[RunSummary]
    clock: int  # the last run's
    end: int  # where its window ended


@pytest.fixture(scope="module")
def schedule(tmp_path_factory) -> Iterator[Schedule]:
    """A first run at FIRST_RUN, then HOURS hourly runs, the clock moved an hour before each."""
    tmp = tmp_path_factory.mktemp("live")
    out = tmp / "out"
    with live_client.start(tmp, now=FIRST_RUN, fleet=BEHAVIOUR, **SIZE) as live:
        config = parse_config(
            config_dict(
                live.base_url,
                out,
                window={"start": iso(T0), "end": "now", "overlap": "0s"},
                extract={"concurrency": 4},
            )
        )
        summaries, clock = [], FIRST_RUN
        for hour in range(HOURS + 1):
            clock = live.set_clock(FIRST_RUN + hour * HOUR_MS)
            summaries.append(run(config))
        assert summaries[-1].window is not None
        yield Schedule(live, out, summaries, clock, summaries[-1].window[1])


def _values(table: pa.Table, series: str) -> pa.Table:
    return table.select([*KEYS, *live_client.VALUES[series]]).sort_by(
        [("param_id", "ascending"), ("ts", "ascending")]
    )


@pytest.mark.parametrize("series", SERIES)
def test_a_schedule_against_the_live_server_ends_exact(schedule, series):
    assert [s.status for s in schedule.summaries] == ["ok"] * (HOURS + 1), [
        s.error for s in schedule.summaries
    ]
    want = _values(schedule.live.expected(series, T0, schedule.end, schedule.clock), series)
    got = _values(read(schedule.out, series), series)
    assert got.num_rows == want.num_rows > 0, (got.num_rows, want.num_rows)
    assert got.equals(want)
    # What the fleet played is in the output: the backlogs came, the quiet and the bare sent nothing.
    ids = set(got.column("param_id").to_pylist())
    assert BACK in ids and LAGGED in ids and GONE in ids
    assert not {p.id for p in FLEET.params if p.object_id == BARE} & ids


def test_the_late_points_were_fetched_late(schedule):
    """The offline controller's backlog came after the first run read past it; a revision was seen."""
    late = [s.late for s in schedule.summaries]
    assert sum(f.points for f in late[1:]) > 0
    assert max(f.longest_ms for f in late) >= 5 * HOUR_MS
    stats = schedule.live.stats()
    assert stats["by_kind"]["raw"]["requests"] > 0 and stats["by_status"].get("500") is None


def test_every_kind_is_read_right(schedule):
    want = schedule.live.expected("raw", T0, schedule.end, schedule.clock)
    kinds = dict(zip(want.column("param_id").to_pylist(), want.column("kind").to_pylist(), strict=True))
    got = read(schedule.out, "raw")
    written = dict(zip(got.column("param_id").to_pylist(), got.column("kind").to_pylist(), strict=True))
    assert written == kinds


def test_the_search_is_read_right_when_the_first_object_has_no_calculated_parameter(tmp_path):
    fleet = live_client.plan(objects=5, params=20, seed=4)
    first = fleet.objects[0].id
    assert not [p for p in fleet.params if p.object_id == first and p.kind == "calculated"]
    with live_client.start(tmp_path, now=FIRST_RUN, objects=5, params=20, seed=4) as live:
        # More lists than requests in flight: etl lists parameters with the search once it trusts it.
        config = config_dict(
            live.base_url, tmp_path / "out", window={"start": iso(T0), "end": iso(T0 + DAY_MS)}
        )
        summary = run(parse_config({**config, "extract": {"concurrency": 4}, "series": ["raw"]}))
        assert summary.status == "ok"
        want = _values(live.expected("raw", T0, T0 + DAY_MS), "raw")
        assert _values(read(tmp_path / "out", "raw"), "raw").equals(want)


def test_init_against_the_live_server_writes_a_config_that_runs_exactly(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ETL_PASSWORD", "demo")
    path, out = tmp_path / "etl.yaml", tmp_path / "out"
    first = FIRST_RUN - DAY_MS // 2
    with live_client.start(tmp_path, now=FIRST_RUN, objects=3, params=9, seed=2) as live:
        code, printed, err = etl_main(
            capsys,
            *("init", "--base-url", live.url, "--username", "demo", "--json", "-o", str(path)),
            *("--start", iso(first), "--sink-path", str(out)),
        )
        assert code == 0, err
        found = json.loads(printed)
        assert found["base_url"] == live.base_url and found["base_path_added"]
        assert found["objects"] == 3 and found["requests_made"] <= 50
        code, printed, err = etl_main(capsys, "run", "-c", str(path), "--json", "--no-progress")
        summary = json.loads(printed)
        assert code == 0 and summary["status"] == "ok", err
        end = to_ms(summary["window"]["end"])
        for series in SERIES:
            want = _values(live.expected(series, first, end), series)
            got = _values(read(out, series), series)
            assert got.num_rows == want.num_rows > 0, series
            assert got.equals(want), series


def test_the_server_answers_as_a_spring_deployment_would(schedule):
    """The choices etl must cope with where the document is silent (servers/live.py's docstring)."""
    live, base = schedule.live, schedule.live.base_url
    bare = httpx.get(f"{base}/db/object")
    assert bare.status_code == 401 and bare.json()["path"] == "/sem-restservices/db/object"
    assert set(bare.json()) == {"timestamp", "status", "error", "path"}
    with httpx.Client(base_url=base) as client:
        assert client.post("/auth/login", data={"username": "demo", "password": "demo"}).status_code == 200
        page = client.get("/search/params", params={"oid": BARE, "offset": 1, "limit": 2}).json()
        assert page["totalElements"] == 4 and page["number"] == 0 and len(page["content"]) == 2
        assert {r["paramType"]["name"] for r in page["content"]} <= {"physical", "calculated", "signal"}
        day = f"{T0}/{T0 + DAY_MS}"
        assert client.get(f"/db/measure/{LAGGED}/{T0}/{T0 + DAY_MS + 1}").status_code == 400  # over 24 h
        assert client.get(f"/db/measure/{REVISED}/{day}").status_code == 404  # calculated
        assert len(client.get(f"/db/measure/{LAGGED}/{day}", params={"count": 7}).json()["points"]) == 7
        live.set_clock(FIRST_RUN)
        try:
            records = {o["id"]: o for o in client.get("/db/object").json()}
        finally:
            live.set_clock(schedule.clock)
    assert records[BARE]["sdirobjectstate"]["id"] == 1 and records[BARE]["controllersTotalCount"] == 0
    assert records[FLEET.objects[1].id]["controllersOfflineCount"] == 1


@pytest.mark.skipif(bool(wrk.missing()), reason=str(wrk.missing()))
def test_the_throughput_benchmark_replays_each_shape_with_wrk(schedule):
    """What `python benchmarks/servers/live_client.py` measures, on a few requests of each shape."""
    for shape in ("raw-hour", "raw-day", "average", "candles"):
        row = live_client.throughput(schedule.live, shape, 20, 4)
        assert row["requests_per_second"] > 0 and row["bytes_per_request"] > 0, shape
