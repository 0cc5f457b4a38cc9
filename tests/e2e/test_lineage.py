"""OpenLineage events, received by a lineage server on a loopback port and each checked against the
spec's JSON schema (tests/support/lineage.py): a good run (START, COMPLETE with its outputs' schema,
statistics and quality metrics), a failed one (FAIL with the error line) and one interrupted by SIGINT
(ABORT) configured by the environment alone, as Airflow's provider configures the client, with the
orchestrator's parent run."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

import etl
from etl.pipeline.lineage import run_uuid
from tests.support.cli import etl_process
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import END, START
from tests.support.lineage import check
from tests.support.receiver import receiver


def by_name(datasets: list[dict]) -> dict[str, dict]:
    return {d["name"].rsplit("/", 1)[-1]: d for d in datasets}


def test_a_good_run_sends_start_then_complete_with_what_it_wrote(emulator, tmp_path):
    out = tmp_path / "out"
    with receiver() as server:
        lineage = {"namespace": "plant", "transport": {"type": "http", "url": server.url}}
        summary = etl.run(make_config(emulator.base_url, out, lineage=lineage))
    assert server.types() == ["START", "COMPLETE"]
    assert server.paths == ["/api/v1/lineage"] * 2
    for event in server.events:
        check(event)
    start, complete = server.events
    run_id = run_uuid(summary.run_id, "plant", "etl.127.0.0.1")
    assert start["run"]["runId"] == complete["run"]["runId"] == run_id
    assert uuid.UUID(run_id).version == 7
    assert complete["job"] == {**complete["job"], "namespace": "plant", "name": "etl.127.0.0.1"}
    facet = complete["run"]["facets"]["etl"]
    assert (facet["runId"], facet["status"], facet["points"]) == (
        summary.run_id,
        "ok",
        summary.as_dict()["points"],
    )
    assert complete["run"]["facets"]["nominalTime"] == {
        **complete["run"]["facets"]["nominalTime"],
        "nominalStartTime": "2026-11-01T00:00:00.000Z",
        "nominalEndTime": "2026-11-03T00:00:00.000Z",
    }

    # Inputs: the platform's series, named without credentials.
    port = emulator.base_url.split(":")[2].split("/")[0]
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [
        (f"http://127.0.0.1:{port}", f"sem-restservices/{s}") for s in ("raw", "average", "candles")
    ]

    # Outputs: each dataset with its schema; once over, what the run wrote to it.
    outputs = by_name(complete["outputs"])
    assert {"raw", "average", "candles", "quality", "parameters", "objects"} <= set(outputs)
    raw = outputs["raw"]
    assert (raw["namespace"], raw["name"]) == ("file", str(out / "raw"))
    assert [f["name"] for f in raw["facets"]["schema"]["fields"]] == [
        "source", "object_id", "param_id", "kind", "ts", "value"
    ]  # fmt: skip
    files = sorted((out / "raw").rglob("*.parquet"))
    stats = raw["outputFacets"]["outputStatistics"]
    assert stats == {
        **stats,
        "rowCount": summary.series["raw"].points,
        "fileCount": len(files),
        "size": sum(f.stat().st_size for f in files),
    }
    metrics = outputs["quality"]["facets"]["dataQualityMetrics"]
    assert metrics["rowCount"] == summary.quality_rows > 0
    assert metrics["columnMetrics"]["completeness"]["min"] == summary.lowest_completeness
    assert "outputStatistics" not in by_name(start["outputs"])["raw"].get("outputFacets", {})


def test_a_failed_run_sends_fail_with_its_error_line(emulator, tmp_path, monkeypatch):
    """Configured by the environment alone, which the client leaves as it found it."""
    data = config_dict(emulator.base_url, tmp_path / "out", series=["raw"])
    data["source"]["password"] = "wrong"
    with receiver() as server:
        monkeypatch.setenv("OPENLINEAGE_URL", server.url)
        before = dict(os.environ)
        with pytest.raises(etl.AuthError) as raised:
            etl.run(write_config(tmp_path / "c.yaml", data))
        assert dict(os.environ) == before
    assert server.types() == ["START", "FAIL"]
    for event in server.events:
        check(event)
    fail = server.events[1]
    assert fail["run"]["facets"]["errorMessage"]["message"] == raised.value.summary.error
    assert fail["run"]["facets"]["etl"]["status"] == "failed"


def test_an_interrupted_run_sends_abort_with_its_parent(fresh_emulator, tmp_path):
    """`etl run` stopped by SIGINT, configured by the environment alone: OPENLINEAGE_URL starts the
    events, OPENLINEAGE_PARENT_ID (the form of Airflow's lineage_parent_id macro) names the task that
    started the run."""
    emulator = fresh_emulator
    emulator.set_faults(latency=0.03)
    parent = str(uuid.uuid4())
    data = config_dict(emulator.base_url, tmp_path / "out", window={"start": START, "end": END})
    data["extract"] = {"concurrency": 2, "slabs_in_flight": 1}
    config = write_config(tmp_path / "c.yaml", data)
    with receiver() as server:
        env = {
            "OPENLINEAGE_URL": server.url,
            "OPENLINEAGE_PARENT_ID": f"airflow/monitoring_etl.run_shard/{parent}",
        }
        proc = etl_process("run", "-c", str(config), "--no-progress", env=env)
        deadline = time.monotonic() + 60
        while not list((tmp_path / "out" / "_state").rglob("log/*.json")):  # a slab is checkpointed
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert server.types() == ["START", "ABORT"], stderr
    for event in server.events:
        check(event)
        assert event["run"]["facets"]["parent"]["run"]["runId"] == parent
        job = event["run"]["facets"]["parent"]["job"]
        assert (job["namespace"], job["name"]) == ("airflow", "monitoring_etl.run_shard")
    abort = server.events[1]
    assert abort["job"]["namespace"] == "etl" and abort["run"]["facets"]["etl"]["status"] == "interrupted"
    assert "interrupted" in abort["run"]["facets"]["errorMessage"]["message"]
    assert abort["run"]["facets"]["etl"]["windows"] > 0  # what it wrote before it stopped


def test_a_transport_that_fails_is_a_warning_not_the_runs_failure(emulator, tmp_path, caplog):
    (tmp_path / "a-file").write_text("")
    lineage = {"transport": {"type": "file", "path": str(tmp_path / "a-file" / "events.jsonl")}}
    summary = etl.run(make_config(emulator.base_url, tmp_path / "out", series=["raw"], lineage=lineage))
    assert summary.status == "ok"
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lineage: could not")]
    assert len(warned) == 2 and "START" in warned[0], warned
