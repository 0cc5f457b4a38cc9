"""Example Airflow 3 DAG: `etl run` every 15 minutes, one mapped task per shard, acting on etl's exit codes.

Copy to your DAGs folder and set ETL, CONFIG and SHARDS (or the environment variables they read).
Needs Airflow 3 and `etl` installed on the workers (its own venv: the DAG runs the `etl` command). The
platform password comes from the Airflow Variable `etl_password` (masked in task logs because its name
says "password").

Exit codes (etl/errors.py): 0 ok; 4 network, 5 server, 130 interrupted: transient, Airflow retries the
task with backoff; 8 another run holds the lock: skipped; 2 config, 3 auth, 6 data, 7 output,
70 bug: failed at once without retries, and the failure callback alerts. The run's summary (`--json`)
is the task's XCom.

A scheduled run fetches what the checkpoints do not cover yet. A backfill's run (`airflow backfill
create`), or any run triggered with the param `window: interval`, fetches its data interval
[data_interval_start, data_interval_end) instead, whatever the checkpoints say. With Airflow's
OpenLineage provider installed, etl's lineage events name the task as their parent run.

A second DAG verifies the output every night (`etl verify --sample 0.01`, per shard): 11, the output
differs from the source, alerts.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DeltaDataIntervalTimetable, Param, Variable, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

ETL = os.environ.get("ETL_COMMAND", "/srv/etl/.venv/bin/etl")
CONFIG = os.environ.get("ETL_CONFIG", "/srv/etl/configs/prod.yaml")
SHARDS = int(os.environ.get("ETL_SHARDS", "4"))

RETRY = {4, 5, 130}  # ExitCode.NETWORK, ExitCode.SERVER, ExitCode.INTERRUPTED
SKIP = {8}  # ExitCode.LOCKED
DIFFERS = 11  # ExitCode.DIFFERS: etl verify found windows that differ from the source


def alert(context: dict[str, Any]) -> None:
    """Replace with Slack, PagerDuty, e-mail...; Airflow calls it when a task finally fails."""
    ti = context["task_instance"]
    print(f"ALERT: {ti.dag_id}.{ti.task_id}[{ti.map_index}] failed: {context.get('exception')}")


def lineage_parent(ti: Any) -> dict[str, str]:
    """OPENLINEAGE_PARENT_ID for etl's lineage events, when Airflow's OpenLineage provider is installed."""
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id
    except ImportError:
        return {}
    return {"OPENLINEAGE_PARENT_ID": lineage_parent_id(ti), "OPENLINEAGE_ROOT_PARENT_ID": lineage_root_parent_id(ti)}


@dag(
    # A run's data interval is the 15 minutes before it (a bare timedelta gives Airflow 3's runs none)
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=15)),
    start_date=datetime(2026, 11, 1),
    catchup=False,  # etl catches up by itself from its checkpoints
    max_active_runs=1,
    params={"window": Param("latest", enum=["latest", "interval"])},
    default_args={
        "retries": 3,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "on_failure_callback": alert,
    },
    tags=["monitoring", "etl"],
)
def monitoring_etl():
    @task
    def run_shard(shard: int) -> dict:
        context = get_current_context()
        command = [ETL, "-q", "run", "-c", CONFIG, "--shard", f"{shard}/{SHARDS}", "--json", "--no-progress"]
        if context["dag_run"].run_type == "backfill" or context["params"]["window"] == "interval":
            start, end = context["data_interval_start"], context["data_interval_end"]
            command += ["--from", start.isoformat(), "--to", end.isoformat()]
        env = {**os.environ, "ETL_PASSWORD": Variable.get("etl_password"), **lineage_parent(context["ti"])}
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
        print(proc.stderr)
        code = proc.returncode
        if code == 0:
            return json.loads(proc.stdout)  # the run summary, kept as the task's XCom
        reason = (proc.stderr.strip().splitlines() or [f"exit {code}"])[-1]
        if code in SKIP:
            raise AirflowSkipException(reason)
        if code in RETRY:
            raise AirflowException(f"etl exit {code} (transient, retried): {reason}")
        raise AirflowFailException(f"etl exit {code}: {reason}")

    run_shard.expand(shard=list(range(SHARDS)))


monitoring_etl()


@dag(
    schedule="40 3 * * *",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0, "on_failure_callback": alert},
    tags=["monitoring", "etl"],
)
def monitoring_etl_verify():
    @task
    def verify_shard(shard: int) -> dict:
        """1% of the shard's checkpointed windows read again, at most 2,000 requests; the result as XCom."""
        env = {**os.environ, "ETL_PASSWORD": Variable.get("etl_password")}
        command = [ETL, "-q", "verify", "-c", CONFIG, "--shard", f"{shard}/{SHARDS}", "--sample", "0.01"]
        proc = subprocess.run(
            [*command, "--max-requests", "2000", "--json"], capture_output=True, text=True, env=env
        )
        print(proc.stderr)
        if proc.returncode == 0:
            return json.loads(proc.stdout)
        reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        if proc.returncode == DIFFERS:  # the verdict names the --seed and --repair that rewrite them
            raise AirflowFailException(f"the output differs from the source: {reason}")
        raise AirflowFailException(f"etl verify exit {proc.returncode}: {reason}")

    verify_shard.expand(shard=list(range(SHARDS)))


monitoring_etl_verify()
