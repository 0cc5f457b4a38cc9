"""Storage on a local folder or memory://: read-modify-write under concurrency, S3 endpoints, leases. Temp
files of live and dead writers: tests/e2e/test_storage_temp_files.py."""

from __future__ import annotations

import threading

import pytest

from etl.storage.atomic import KEEP, Storage, storage_options


def test_concurrent_updates_of_one_file_are_never_lost(tmp_path):
    Storage(str(tmp_path)).write_atomic("d/counter", b"0")

    def bump() -> None:
        storage = Storage(str(tmp_path))
        for _ in range(25):
            storage.update("d/counter", lambda data: str(int(data) + 1).encode())

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    storage = Storage(str(tmp_path))
    assert storage.read("d/counter") == b"100"
    assert storage.update("d/counter", lambda data: KEEP) is KEEP and storage.read("d/counter") == b"100"
    assert storage.update("d/counter", lambda data: None) is None and storage.read("d/counter") is None
    assert storage.listdir("d") == []  # the folder itself is locked: no lock file among the data


def test_s3_endpoint_from_environment_unless_the_options_name_one(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    assert storage_options("s3://b/x", {})["endpoint_url"] == "http://127.0.0.1:9000"
    assert (
        storage_options("s3://b/x", {"endpoint_url": "http://minio:9000"})["endpoint_url"]
        == "http://minio:9000"
    )
    assert "endpoint_url" not in storage_options(
        "s3://b/x", {"client_kwargs": {"endpoint_url": "http://m:1"}}
    )
    assert "endpoint_url" not in storage_options("/local/folder", {})
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:9000")  # the service-specific one wins
    assert storage_options("s3://b/x", {})["endpoint_url"] == "http://s3-only:9000"


def test_a_lease_lost_to_a_simultaneous_taker_is_refused_where_writes_are_not_conditional(monkeypatch):
    """memory:// has no compare-and-swap: after taking the lease, a run reads it back and steps aside
    when a rival's write landed last."""
    from etl.errors import LockedError
    from etl.state import StateStore
    from etl.state.lock import LOCK_FILE

    monkeypatch.setattr("etl.state.lock.LEASE_SETTLE", 0.01)
    store = StateStore(Storage("memory://lease-race/state"), lease_seconds=60)
    assert not store.storage.compare_and_swap
    real_update = Storage.update

    def update_then_rival_writes(self, rel, change, attempts=8):
        result = real_update(self, rel, change, attempts)
        self.write_atomic(LOCK_FILE, b'{"token": "rival", "expires": 9e99, "pid": 1, "host": "other"}')
        return result

    monkeypatch.setattr(Storage, "update", update_then_rival_writes)
    with pytest.raises(LockedError, match="at the same time"), store.lock():
        pass
    monkeypatch.setattr(Storage, "update", real_update)
    store.storage.remove(LOCK_FILE)
    with store.lock():  # alone, the lease is taken and released
        assert b'"token"' in store.storage.read(LOCK_FILE)
    assert store.storage.read(LOCK_FILE) is None
