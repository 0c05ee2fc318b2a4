"""How many CPUs this process may use, and the thread pools it keeps.

The count is the affinity mask capped by a cgroup's CPU quota (a container's --cpus), not the
machine's count that os.cpu_count() reports."""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Callable

CGROUP_ROOT = Path("/sys/fs/cgroup")


def quota_cpus(root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs a cgroup quota allows (cgroup v2 cpu.max, else v1 cfs_quota/period); None: no quota."""
    try:
        quota, _, period = (root / "cpu.max").read_text().partition(" ")
        if quota.strip() != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


@lru_cache(maxsize=1)
def available_cpus() -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup quota (rounded up); at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    quota = quota_cpus()
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)


# How long an idle OpenMP thread of torch's spins before it sleeps (GNU OpenMP's GOMP_SPINCOUNT; its
# default, 300,000, is milliseconds of a core). Measured on a 2-core EPYC: after each query's encoding
# serve's model thread spun 5-8 ms of a core the scorer's threads wanted; beside OCR the model's threads
# waiting at a barrier or between batches spun on cores Tesseract wanted (docs/performance.md).
OPENMP_SPIN = "1000"


def short_openmp_spin() -> None:
    """Short OpenMP spinning for a process that shares its cores (serve's scorer, a build's OCR): set
    before torch is loaded (GNU OpenMP reads it then); a value the user set wins, and once torch is
    loaded it changes nothing."""
    if "torch" not in sys.modules:
        os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN)


class SharedPool:
    """A thread pool a process starts once, made by `start` the first time it is asked for (callers
    race safely), then the same one."""

    def __init__(self, start: Callable[[], ThreadPoolExecutor]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def __call__(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = self._start()
            return self._pool
