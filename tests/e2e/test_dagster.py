"""etl.dagster's assets materialized in-process by Dagster (`dagster.materialize`) against the emulator:
a range of daily partitions is one run that lands exactly that range, with the run's figures as
metadata and the quality check; a run that fails is the step's failure with etl's one line; the
exit classes map to Dagster's retry and skip."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("dagster")

import dagster as dg  # noqa: E402

from etl.dagster import dagster_outcome, etl_assets  # noqa: E402
from etl.errors import AuthError, DataError, Interrupted, LockedError, NetworkError, ServerError  # noqa: E402
from tests.support.checks import assert_exact  # noqa: E402
from tests.support.configs import make_config  # noqa: E402

DAY = 86_400_000


def test_a_range_of_partitions_is_one_run_that_lands_exactly(emulator, tmp_path):
    """Then the "latest" job's incremental run fetches the rest of the window, and each run's lineage
    names the Dagster run that started it."""
    out, events = tmp_path / "out", tmp_path / "lineage.jsonl"
    window = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-05T00:00:00Z"}
    lineage = {"transport": {"type": "file", "path": str(events)}}
    defs = etl_assets(make_config(emulator.base_url, out, window=window, lineage=lineage))
    [assets] = defs["assets"]
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [assets],
        # What a backfill of a single-run policy launches: one run tagged with the range
        tags={
            "dagster/asset_partition_range_start": "2026-11-01",
            "dagster/asset_partition_range_end": "2026-11-02",
        },
        instance=instance,
        raise_on_error=False,
    )
    assert result.success
    assert_exact(out, "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")
    runs = sorted((out / "_runs").glob("*.json"))
    assert len(runs) == 1  # one etl run for the two days
    materialized = {
        m.asset_key.path[-1]: m for m in result.asset_materializations_for_node(assets.node_def.name)
    }
    assert set(materialized) == {"raw", "average", "candles", "quality"}
    raw = materialized["raw"].metadata
    assert raw["points"].value > 0 and raw["requests"].value > 0 and raw["windows"].value > 0
    assert {"seconds", "late_points", "lowest_completeness", "etl_run_id"} <= set(raw)
    assert raw["etl_run_id"].value == runs[0].stem
    assert raw["window"].value == "2026-11-01T00:00:00.000Z .. 2026-11-03T00:00:00.000Z"
    assert materialized["quality"].metadata["rows"].value > 0
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "completeness" and check.metadata["parameter_days"].value > 0
    assert check.passed == (check.metadata["below"].value == 0)

    [latest] = [job for job in defs["jobs"] if job.name == "etl_latest"]
    incremental = latest.execute_in_process(instance=instance)
    assert incremental.success and incremental.output_for_node("etl_latest")["status"] == "ok"
    assert_exact(out, window["start"], window["end"])
    parents = [json.loads(line)["run"]["facets"]["parent"] for line in events.read_text().splitlines()]
    assert [(p["job"]["name"], p["run"]["runId"]) for p in parents] == [
        (result.dagster_run.job_name, result.run_id)
    ] * 2 + [("etl_latest", incremental.run_id)] * 2


def test_a_failed_run_fails_the_step_with_etls_line(emulator, tmp_path):
    data = {"window": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-03T00:00:00Z"}, "series": ["raw"]}
    config = make_config(emulator.base_url, tmp_path / "out", **data)
    config = config.model_copy(
        update={
            "source": config.source.model_copy(update={"password": __import__("pydantic").SecretStr("wrong")})
        }
    )
    [assets] = etl_assets(config)["assets"]
    result = dg.materialize(
        [assets], partition_key="2026-11-01", instance=dg.DagsterInstance.ephemeral(), raise_on_error=False
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_failure_data.user_failure_data.description.startswith("etl exit 3: sign-in")


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (NetworkError("unreachable"), dg.RetryRequested),
        (ServerError("503", 503), dg.RetryRequested),
        (Interrupted("interrupted"), dg.RetryRequested),
        (AuthError("refused"), dg.Failure),
        (DataError("2 window(s) failed"), dg.Failure),
        (LockedError("held"), None),
    ],
)
def test_exit_classes_map_to_dagsters_policies(error, raised):
    outcome = dagster_outcome(error, (3, 60.0))
    assert (type(outcome) if outcome is not None else None) is raised
    if isinstance(outcome, dg.RetryRequested):
        assert (outcome.max_retries, outcome.seconds_to_wait) == (3, 60.0)
    if isinstance(outcome, dg.Failure):
        assert outcome.description == f"etl exit {error.exit_code}: {error}" and not outcome.allow_retries
