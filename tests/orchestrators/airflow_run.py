"""Run by the Airflow venv's Python (not pytest's): docs/airflow/etl_dag.py executed by Airflow 3's
`dag.test()` with a SQLite metadata database in $AIRFLOW_HOME. Prints one JSON line: every task
instance's map index, state and tries, its XCom, and the failure callback's alerts.

    python airflow_run.py DAG_FILE LOGICAL_DATE RUN_CONF_JSON RETRY_DELAY_SECONDS
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from datetime import datetime, timedelta


def main(dag_file: str, logical_date: str, run_conf: str, retry_seconds: str) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    bag = DagBag(dag_folder=dag_file)
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("monitoring_etl")
    for task in dag.tasks:  # the DAG's own policy, with a delay a test can wait for
        task.retry_delay = timedelta(seconds=float(retry_seconds))
        task.retry_exponential_backoff = False
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run = dag.test(logical_date=datetime.fromisoformat(logical_date), run_conf=json.loads(run_conf))
    with create_session() as session:
        tis = run.get_task_instances(session=session)
        xcoms = {
            x.map_index: x.value
            for x in session.scalars(
                select(XComModel).where(XComModel.run_id == run.run_id, XComModel.key == "return_value")
            )
        }
        found = {
            "state": str(run.state),
            "data_interval": [run.data_interval_start.isoformat(), run.data_interval_end.isoformat()],
            "tasks": [
                {
                    "map_index": ti.map_index,
                    "state": str(ti.state),
                    "tries": ti.try_number,
                    "xcom": xcoms.get(ti.map_index),
                }
                for ti in sorted(tis, key=lambda ti: ti.map_index)
            ],
            "alerts": [line for line in printed.getvalue().splitlines() if line.startswith("ALERT: ")],
        }
    print("RESULT " + json.dumps(found, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:])
