"""The fleet's catalog kept between runs (etl/pipeline/catalog.py, etl/state/catalog.py), against the
emulator: hourly runs list the parameters of about a 24th of the objects each and every object again
within `select.refresh`; a new object, and a new parameter of a known object, land within the bound with
their whole window; a parameter gone (no longer listed, or its series answering 404) stops costing
requests and is named; a login never reads what another listed."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from etl.cli.render import plan_text
from etl.client import MonitoringClient
from etl.config import SelectConfig
from etl.pipeline.catalog import CatalogOptions
from etl.pipeline.discover import Discovery, discover
from etl.state.catalog import Catalog, login_key
from etl.storage.atomic import Storage
from etl.timeutil import DAY_MS, HOUR_MS
from etl_emulator.dataset import Dataset
from etl_emulator.server import run_emulator
from tests.support.emulator import emulator_config, series_requests
from tests.support.expected import SERIES, SOURCE, expected_table
from tests.support.output import read
from tests.support.pipeline import run
from tests.support.schedule import FIRST_RUN, T0, config_for

LISTS = ("/db/contrdeviceparam", "/db/contrcalcparam")


def _listed_objects(emu) -> set[int]:
    """The objects whose parameters the requests since the log was cleared listed (lists and search)."""
    found: set[int] = set()
    for r in emu.requests():
        if r["path"].endswith(LISTS):
            found.add(int(r["query"]["objectId"]))
        elif r["path"].endswith("/search/params"):
            oid = r["query"]["oid"]
            found.update(int(o) for o in (oid if isinstance(oid, list) else [oid]))
    return found


async def _discover(client: MonitoringClient, folder, now: int, full: bool = False) -> Discovery:
    store = Catalog(Storage(str(folder)), login_key(client.session.base_url, client.session.username))
    found = await discover(client, SelectConfig(), CatalogOptions(store, now, DAY_MS, full))
    found.save_catalog()
    found.objects.close()
    found.parameters.close()
    return found


def test_hourly_runs_list_a_24th_of_the_objects_and_each_again_within_the_bound(tmp_path):
    """48 objects: the first run lists them all, each hourly run after it 2 (up to 5, as the first
    listing's spread settles), and every object is listed again within 24 hours; each run still knows
    every parameter. Forced, a run lists them all. A login's run never reads the catalog another login's
    runs wrote: it lists what it sees itself."""

    async def runs(emu) -> None:
        async with MonitoringClient(emu.base_url, "demo", "demo") as client:
            listed_at: dict[int, int] = {}
            for hour in range(25):
                now = T0 + hour * HOUR_MS
                emu.clear_requests()
                found = await _discover(client, tmp_path, now)
                objects = _listed_objects(emu)
                assert (
                    len(found.params) == found.parameters.count == 96
                )  # the plan's and the dimension table's
                assert found.catalog.listed == len(objects)
                assert len(objects) == 48 if hour == 0 else 1 <= len(objects) <= 5, (hour, sorted(objects))
                for o in objects:
                    assert now - listed_at.get(o, now) < DAY_MS
                    listed_at[o] = now
                age = found.catalog.as_dict()["age_seconds"]
                assert hour == 0 or age is not None and age < DAY_MS / 1000
            assert min(listed_at.values()) > T0  # every object listed again since the first run

            emu.clear_requests()
            forced = await _discover(client, tmp_path, T0 + 25 * HOUR_MS, full=True)
            assert _listed_objects(emu) == set(range(1, 49))
            assert forced.catalog.as_dict()["listed_all"] == "asked"

        async with MonitoringClient(emu.base_url, "restricted", "restricted") as client:
            emu.clear_requests()
            restricted = await _discover(client, tmp_path, T0 + 26 * HOUR_MS)
            odd = set(range(1, 49, 2))
            assert not restricted.catalog.kept and _listed_objects(emu) == odd
            assert set(restricted.params.object_id.tolist()) == odd and len(restricted.params) == 48

        async with MonitoringClient(emu.base_url, "demo", "demo") as client:
            again = await _discover(client, tmp_path, T0 + 26 * HOUR_MS)
            assert again.catalog.kept and len(again.params) == 96

    with run_emulator(emulator_config(objects=48, params_per_object=1, calc_per_object=1)) as emu:
        asyncio.run(runs(emu))


@pytest.fixture(scope="module")
def changing(tmp_path_factory):
    """A schedule of four hourly runs with `select.refresh: 4h` (two objects: the first run's listing
    makes object 1 due in 2 hours, object 2 in 4). Before the second run, object 3 appears, object 2 gets
    parameter 2004, and 1002 (object 1, listed again that run) and 2002 (object 2, kept from the catalog)
    go. Each run's summary, series requests and objects listed; the output; a plan after the last run."""
    out = tmp_path_factory.mktemp("changing")
    with run_emulator(emulator_config(now_ms=FIRST_RUN)) as emu:
        config = config_for(emu, out, select={"refresh": "4h"})
        summaries, series, listed = [], [], []
        for i in range(4):
            emu.set_clock(FIRST_RUN + i * HOUR_MS)
            emu.clear_requests()
            if i == 1:
                emu.set_fleet(objects=3, added=[2004], removed=[1002, 2002])
            summaries.append(run(config))
            series.append(series_requests(emu))
            listed.append(_listed_objects(emu))
        yield summaries, series, listed, out, run(config, dry_run=True)


def test_a_parameter_gone_stops_costing_requests_and_is_named(changing):
    summaries, series, listed, _, _ = changing
    gone = summaries[1]
    assert listed[1] == {1, 3}  # object 1 due, object 3 new; object 2 kept from the catalog
    assert gone.status == "ok" and not gone.failed_windows and gone.windows_not_done == 0
    assert gone.catalog.gone == [1002, 2002] and gone.as_dict()["catalog"]["gone_count"] == 2
    assert "2 parameter(s) no longer listed or served (404): 1002, 2002" in gone.text()
    # 2002, kept from the catalog, was asked until its first 404; neither is asked in the runs after
    assert {r["param_id"] for r in series[1]} & {1002, 2002} == {2002}
    assert not {r["param_id"] for s in series[2:] for r in s} & {1002, 2002}
    assert all(not s.catalog.gone for s in summaries[2:])


def test_a_new_object_and_a_new_parameter_land_within_the_bound_with_their_whole_window(changing):
    summaries, series, listed, out, plan = changing
    assert listed[0] == {1, 2} and listed[2] == set() and listed[3] == {2}  # object 2 due again by 4h
    assert 3001 in {r["param_id"] for r in series[1]} and 2004 not in {
        r["param_id"] for s in series[:3] for r in s
    }
    assert [s.parameters for s in summaries] == [8, 11, 10, 11]
    fleet = Dataset(
        seed=7, objects=3, params_per_object=3, calc_per_object=1, added=(2004,), removed=(1002, 2002)
    )
    end = summaries[-1].window[1]
    for name in SERIES:
        want = expected_table(fleet, name, T0, end, now=FIRST_RUN + 3 * HOUR_MS)
        got = read(out, name)
        got = got.filter(
            pc.invert(pc.is_in(got.column("param_id"), value_set=pa.array([1002, 2002], pa.int64())))
        )
        got = got.select(want.column_names).sort_by([("param_id", "ascending"), ("ts", "ascending")])
        assert got.num_rows == want.num_rows and got.equals(want), name
    # The dimension table names every parameter, those listed by the last run and those kept
    dimension = pq.read_table(out / "dimensions" / "parameters" / f"{SOURCE}.parquet", columns=["id"])
    every = [p for o in fleet.object_ids for p in fleet.physical_ids(o) + fleet.calc_ids(o)]
    assert sorted(dimension.column("id").to_pylist()) == every
    text = plan_text(plan.as_dict())
    assert (
        "catalog     the parameters of 0 of 3 objects listed, the others kept; the oldest listing kept"
        in text
    )
    assert plan.catalog.as_dict()["age_seconds"] < 4 * 3600
