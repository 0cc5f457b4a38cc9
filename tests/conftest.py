"""Fixtures: a real emulator on a free port, configs pointing at it, an S3 server (moto) and a Dask
cluster of separate worker processes, all on loopback."""

from __future__ import annotations

import copy
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings

from etl.config import Config, parse_config
from etl_emulator.server import EmulatorConfig, RunningEmulator, run_emulator

# Property tests assert properties, not timings: a loaded 2-core CI machine must not fail them.
settings.register_profile("etl", deadline=None)
settings.load_profile("etl")

# A fixed clock far after the test windows, so "now" never cuts a window short.
NOW = "2026-11-20T00:00:00Z"
START = "2026-11-01T00:00:00Z"
END = "2026-11-03T00:00:00Z"


def emulator_config(**overrides: Any) -> EmulatorConfig:
    from etl.timeutil import to_ms

    base = dict(seed=7, objects=2, params_per_object=3, calc_per_object=1, now_ms=to_ms(NOW))
    base.update(overrides)
    return EmulatorConfig(**base)


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


def config_dict(base_url: str, out: Path, **sections: Any) -> dict:
    data = {
        "source": {"base_url": base_url, "username": "demo", "password": "demo"},
        "select": {"objects": "all"},
        "series": ["raw", "average", "candles"],
        "window": {"start": START, "end": END, "overlap": "1h"},
        "extract": {"concurrency": 8},
        "retry": {"attempts": 8, "backoff_initial": 0.01, "backoff_max": 0.2, "deadline": 60},
        "sink": {"format": "parquet", "path": str(out)},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return copy.deepcopy(data)


def make_config(base_url: str, out: Path, **sections: Any) -> Config:
    return parse_config(config_dict(base_url, out, **sections))


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


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
    `make test`) on a free loopback port, for the Iceberg SQL catalog."""
    import shutil

    from tests.postgres import Missing, binaries, running_postgres

    try:
        binaries()
    except Missing as exc:
        if shutil.which("apt-get") is None:
            pytest.skip(f"PostgreSQL is not installed and this machine has no apt to install it: {exc}")
        pytest.fail(f"PostgreSQL is not installed ({exc}): `make postgres` installs Debian's postgresql")
    with running_postgres() as running:
        yield running
