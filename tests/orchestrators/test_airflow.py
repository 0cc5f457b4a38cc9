"""docs/airflow/etl_dag.py run by Airflow 3 for real: `dag.test()` with a SQLite metadata database, in
the Airflow venv of its own (`make test-orchestrators` makes it: Airflow's pins would fight the dev
venv's), each DAG run in a child process (tests/orchestrators/airflow_run.py) whose task runs the
`etl` command of the dev venv against the emulator: the mapped shard tasks and their XCom summaries, the
data interval as the run's window, and the exit codes as Airflow's retry, skip and failure."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from etl.errors import ExitCode
from etl.model import Shard
from etl.sinks.output import Output
from etl_emulator.server import RunningEmulator, run_emulator
from tests.support import ROOT
from tests.support.checks import assert_exact
from tests.support.configs import config_dict, make_config, write_config
from tests.support.emulator import emulator_config
from tests.support.output import read

pytestmark = pytest.mark.orchestrators

AIRFLOW_PYTHON = Path(os.environ.get("AIRFLOW_PYTHON", ROOT / ".venv-airflow/bin/python"))
DAG = ROOT / "docs/airflow/etl_dag.py"
ETL = ROOT / ".venv/bin/etl"


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> dict[str, str]:
    """A fresh AIRFLOW_HOME, its SQLite database migrated, the docs' DAG its only DAG."""
    assert AIRFLOW_PYTHON.exists(), (
        f"{AIRFLOW_PYTHON}: run make test-orchestrators (it makes the Airflow venv)"
    )
    home = tmp_path_factory.mktemp("airflow")
    (home / "dags").mkdir()
    (home / "dags/etl_dag.py").write_bytes(DAG.read_bytes())
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "ETL_COMMAND": str(ETL),
    }
    airflow = AIRFLOW_PYTHON.parent / "airflow"
    done = subprocess.run(
        [str(airflow), "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def server() -> Iterator[RunningEmulator]:
    with run_emulator(emulator_config()) as running:
        yield running


def dag_run(airflow: dict[str, str], config: Path, shards: int, password: str = "demo", **conf) -> dict:
    """One run of the DAG by dag.test(): its task instances (map index, state, tries, XCom), data
    interval and the failure callback's alerts."""
    env = {
        **airflow,
        "ETL_CONFIG": str(config),
        "ETL_SHARDS": str(shards),
        "AIRFLOW_VAR_ETL_PASSWORD": password,
    }
    done = subprocess.run(
        [
            str(AIRFLOW_PYTHON),
            str(Path(__file__).parent / "airflow_run.py"),
            str(Path(airflow["AIRFLOW__CORE__DAGS_FOLDER"]) / "etl_dag.py"),
            "2026-11-01T06:00:00+00:00",
            json.dumps(conf),
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-5000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def config_file(emulator: RunningEmulator, folder: Path, **sections) -> Path:
    data = config_dict(emulator.base_url, folder / "out", series=["raw"], **sections)
    data["source"]["password"] = "${ETL_PASSWORD}"
    return write_config(folder / "c.yaml", data)


def test_mapped_shards_fetch_the_data_interval_and_return_their_summaries(airflow_home, server, tmp_path):
    """Asked for its interval (as a backfill's run is), each shard fetches [data_interval_start,
    data_interval_end): together exactly the source's points of those 15 minutes."""
    config = config_file(server, tmp_path)
    found = dag_run(airflow_home, config, 2, window="interval")
    assert found["state"] == "success"
    assert found["data_interval"] == ["2026-11-01T05:45:00+00:00", "2026-11-01T06:00:00+00:00"]
    tasks = found["tasks"]
    assert [(t["map_index"], t["state"], t["tries"]) for t in tasks] == [(0, "success", 1), (1, "success", 1)]
    summaries = [t["xcom"] for t in tasks]
    assert [s["shard"] for s in summaries] == ["0/2", "1/2"]
    assert all(
        s["status"] == "ok"
        and s["window"] == {"start": "2026-11-01T05:45:00.000Z", "end": "2026-11-01T06:00:00.000Z"}
        for s in summaries
    )
    assert_exact(tmp_path / "out", "2026-11-01T05:45:00Z", "2026-11-01T06:00:00Z", series=["raw"])
    assert read(tmp_path / "out", "raw").num_rows == sum(s["points"] for s in summaries)


def test_a_transient_exit_is_retried_then_alerts(airflow_home, tmp_path):
    """Exit 5 (the server answers 503 to everything): the DAG's retries, then its failure callback."""
    with run_emulator(emulator_config()) as failing:
        failing.set_faults(error_rate=1.0)
        config = config_file(failing, tmp_path, retry={"attempts": 2, "backoff_initial": 0.01, "deadline": 5})
        found = dag_run(airflow_home, config, 1)
    [task] = found["tasks"]
    assert (task["state"], task["tries"], task["xcom"]) == ("failed", 4, None)  # the first try and 3 retries
    assert len(found["alerts"]) == 1 and "etl exit 5 (transient, retried)" in found["alerts"][0]


def test_a_held_lock_skips_the_task(airflow_home, server, tmp_path):
    """Exit 8: the previous run still holds the shard's lock; the task is skipped, nobody is alerted."""
    config = config_file(server, tmp_path)
    store = Output(make_config(server.base_url, tmp_path / "out"), Shard.parse("0/1")).state_store()
    with store.lock():
        found = dag_run(airflow_home, config, 1)
    [task] = found["tasks"]
    assert (task["state"], task["tries"], found["alerts"]) == ("skipped", 1, [])


def test_a_refused_sign_in_fails_at_once_with_etls_line(airflow_home, server, tmp_path):
    """Exit 3: failed without a retry, the alert carrying etl's one line."""
    found = dag_run(airflow_home, config_file(server, tmp_path), 1, password="wrong")
    [task] = found["tasks"]
    assert (task["state"], task["tries"]) == ("failed", 1)
    [alert] = found["alerts"]
    assert "etl exit 3: etl: error: sign-in" in alert, alert


def test_the_dag_acts_on_etls_exit_classes():
    """The codes the runs above do not reach (4, 130) are in the DAG's sets with those they do, and the
    nightly verify's DAG knows etl verify's own (11)."""
    tree = ast.parse(DAG.read_text())
    sets = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("RETRY", "SKIP", "DIFFERS")
    }
    assert sets == {
        "RETRY": {ExitCode.NETWORK, ExitCode.SERVER, ExitCode.INTERRUPTED},
        "SKIP": {ExitCode.LOCKED},
        "DIFFERS": ExitCode.DIFFERS,
    }
