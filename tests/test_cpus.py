"""The CPU count the library sizes its threads and workers by: affinity and a cgroup quota count."""

from __future__ import annotations

import os

import pytest

from localgpt_index.core import cpus


def test_a_cgroup_v2_quota_caps_the_count(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpus.quota_cpus(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpus.quota_cpus(tmp_path) is None


def test_a_cgroup_v1_quota_counts_where_v2_is_absent(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.quota_cpus(tmp_path) == 2.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.quota_cpus(tmp_path) is None
    assert cpus.quota_cpus(tmp_path / "absent") is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is a Linux call")
def test_the_affinity_mask_and_the_quota_bound_the_count(monkeypatch):
    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    monkeypatch.setattr(cpus, "quota_cpus", lambda root=cpus.CGROUP_ROOT: 2.5)
    cpus.available_cpus.cache_clear()
    try:
        assert cpus.available_cpus() == 3  # a quota of 2.5 CPUs keeps 3 threads busy at most
        monkeypatch.setattr(cpus, "quota_cpus", lambda root=cpus.CGROUP_ROOT: None)
        cpus.available_cpus.cache_clear()
        assert cpus.available_cpus() == 6  # the mask, not the machine's count
    finally:
        cpus.available_cpus.cache_clear()
