"""--shard I/N: a deterministic split of the parameters; each shard has its own checkpoints and lock."""

from __future__ import annotations

import json
import threading

import pyarrow.parquet as pq

from etl.model import Shard
from etl.state.budget import BUDGET_FILE
from etl_emulator.faults import Faults
from etl_emulator.server import run_emulator
from tests.support.checks import assert_exact
from tests.support.cli import etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START, emulator_config
from tests.support.expected import SOURCE
from tests.support.output import checkpoints, data_files
from tests.support.pipeline import run

PARAMS = {1001, 1002, 1003, 1501, 2001, 2002, 2003, 2501}


def test_three_shards_side_by_side_equal_one_run(emulator, tmp_path):
    out = tmp_path / "out"
    path = write_config(tmp_path / "c.yaml", config_dict(emulator.base_url, out))
    jobs = [
        etl_process("run", "-c", str(path), "--shard", f"{i}/3", "--json", "--no-progress") for i in range(3)
    ]
    results = [(job.wait(120), *job.communicate()) for job in jobs]
    # All three ran at once: none waited for (or was refused by) another's lock.
    assert [code for code, _, _ in results] == [0, 0, 0], [err for _, _, err in results]
    summaries = [json.loads(stdout) for _, stdout, _ in results]
    assert sum(s["parameters"] for s in summaries) == len(PARAMS)
    assert_exact(out, START, END)

    covered = []
    for i in range(3):
        ids = {row["param_id"] for row in checkpoints(out, Shard(i, 3)).rows()}
        assert ids == {p for p in PARAMS if Shard(i, 3).contains(p)}
        covered.append(ids)
        parts = list(out.rglob(f"part-{SOURCE}-s{i}of3-b*.parquet"))
        assert parts
        for part in parts:  # each shard's files hold its parameters only
            assert set(pq.read_table(part).column("param_id").to_pylist()) <= ids
    assert set().union(*covered) == PARAMS and sum(map(len, covered)) == len(PARAMS)
    assert not len(checkpoints(out))  # the unsharded store was never written


def test_switching_to_shards_moves_rows_without_loss_or_duplicates(emulator, tmp_path):
    """An unsharded output taken over by 2 concurrent shards: each re-fetches its parameters (its own
    checkpoints are empty) and removes them from the unsharded files, which both rewrite at once."""
    config = make_config(emulator.base_url, tmp_path, sink={"buckets": 1})
    run(config)
    unsharded = f"part-{SOURCE}-b0of1.parquet"
    assert (tmp_path / "raw/date=2026-11-01" / unsharded).exists()

    errors: list[BaseException] = []

    def shard(i: int) -> None:
        try:
            run(config, shard=Shard(i, 2))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=shard, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert_exact(tmp_path, START, END)
    assert not list(tmp_path.rglob(unsharded))  # emptied by the shards, so removed
    names = {f.rsplit("/", 1)[1] for f in data_files(tmp_path, "raw")}
    assert names == {f"part-{SOURCE}-s0of2-b0of1.parquet", f"part-{SOURCE}-s1of2-b0of1.parquet"}


def test_shards_at_once_share_the_sources_limit(tmp_path):
    """`extract.concurrency: 2` against a server of 2 workers that refuses (503) past one request waiting:
    two shards at once take one request each (etl/state/budget.py), so the server never refuses; the
    budget file goes with the last of them."""
    faults = Faults(capacity=2, service_time=0.05, queue_max=1)
    with run_emulator(emulator_config(faults=faults)) as emu:
        out = tmp_path / "out"
        data = config_dict(emu.base_url, out, series=["raw"], extract={"concurrency": 2})
        path = write_config(tmp_path / "c.yaml", data)
        jobs = [etl_process("run", "-c", str(path), "--shard", f"{i}/2", "--no-progress") for i in range(2)]
        results = [(job.wait(120), job.communicate()[1]) for job in jobs]
        shed = [r for r in emu.requests() if r.get("fault") == "shed"]
    assert [code for code, _ in results] == [0, 0], [err for _, err in results]
    assert not shed
    assert_exact(out, START, END, series=["raw"])
    assert not (out / "_state" / SOURCE / BUDGET_FILE).exists()
