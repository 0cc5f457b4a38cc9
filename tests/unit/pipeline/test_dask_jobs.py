"""What Dask workers get of a run, without a cluster: the password travels with the job but shows in no
text Dask prints. Runs on a LocalCluster of worker processes: tests/e2e/test_dask.py."""

from __future__ import annotations

import pickle

from etl.model import Series
from etl.pipeline.build import Build, Decisions
from etl.pipeline.plan import Slab
from etl.pipeline.slab import SlabJob
from etl.timeutil import DAY_MS
from tests.support.configs import make_config


def test_jobs_show_no_secret_where_dask_prints_them(tmp_path):
    config = make_config("http://127.0.0.1:1/sem-restservices", tmp_path, source={"password": "pa55-w0rd-x"})
    job = SlabJob(config, Slab(Series.RAW, 0, DAY_MS, 0, ()), Decisions(buckets=1, quality_end=DAY_MS))
    for text in (repr(job), str(job), repr(job.config), str(job.config.source)):
        assert "pa55-w0rd-x" not in text
    assert Build(pickle.loads(pickle.dumps(job)).config).password == "pa55-w0rd-x"  # still shipped
