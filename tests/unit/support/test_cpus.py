"""The CPUs a process may use: a container's quota counts, not the host's cores (the writers' pool is
sized by it, etl/pipeline/loop.py)."""

from __future__ import annotations

import os

import pytest

from etl.support import cpus


@pytest.fixture
def cgroup(tmp_path, monkeypatch):
    monkeypatch.setattr(cpus, "CGROUP", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    return tmp_path


def test_a_cgroup_v2_quota_bounds_the_host_cores(cgroup):
    (cgroup / "cpu.max").write_text("150000 100000\n")
    assert cpus.usable() == 2


def test_no_quota_leaves_the_affinity(cgroup):
    (cgroup / "cpu.max").write_text("max 100000\n")
    assert cpus.usable() == 64
    (cgroup / "cpu.max").unlink()
    assert cpus.usable() == 64  # no cgroup files at all


def test_a_cgroup_v1_quota_counts_too(cgroup):
    (cgroup / "cpu").mkdir()
    (cgroup / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (cgroup / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.usable() == 4
    (cgroup / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.usable() == 64


def test_a_quota_below_one_cpu_is_still_one(cgroup):
    (cgroup / "cpu.max").write_text("20000 100000\n")
    assert cpus.usable() == 1
