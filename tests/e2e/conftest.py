"""The servers end-to-end tests run against, as fixtures: a real emulator on a free port, an S3 server
(moto), a PostgreSQL cluster and a Dask cluster of separate worker processes, all on loopback. Their helpers (emulator_config,
configs pointing at an emulator, S3_ENV) are in tests/support."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pytest

from etl_emulator.server import RunningEmulator, run_emulator
from tests.support.configs import S3_ENV
from tests.support.emulator import emulator_config


@pytest.fixture(scope="session")
def emulator() -> Iterator[RunningEmulator]:
    """One shared emulator for tests that do not change its faults or clock."""
    with run_emulator(emulator_config()) as running:
        yield running


@pytest.fixture
def fresh_emulator() -> Iterator[RunningEmulator]:
    """A private emulator for tests that inject faults or read the request log."""
    with run_emulator(emulator_config()) as running:
        yield running


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3-compatible server (moto's server mode) on a free loopback port. Its URL is exported as
    AWS_ENDPOINT_URL with dummy credentials, for this process and the `etl` processes tests start."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=url)
    try:
        yield url
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture
def bucket(s3_server: str) -> str:
    """A new empty bucket, as s3://name."""
    import s3fs

    name = f"etl-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True).mkdir(name)
    return f"s3://{name}"


@pytest.fixture(scope="session")
def dask_cluster():
    """A dask.distributed LocalCluster of 2 separate worker processes (1 thread each) on loopback."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL cluster (Debian's `postgresql`, installed by `make postgres`, part of
    `make test`) on a free loopback port, for the Iceberg SQL catalog and the PostgreSQL sinks
    (tests/support/postgres.py's `sink`: a schema per test)."""
    from tests.support.debian import require
    from tests.support.postgres import Missing, binaries, running_postgres

    require(binaries, Missing, "postgresql", "postgres")
    from tests.support.postgres import VARIABLE

    with running_postgres() as running:
        saved = os.environ.get(VARIABLE)
        os.environ[VARIABLE] = running.password  # the PostgreSQL sinks' dsn reads it, in child processes too
        try:
            yield running
        finally:
            if saved is None:
                os.environ.pop(VARIABLE, None)
            else:
                os.environ[VARIABLE] = saved
