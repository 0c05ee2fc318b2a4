"""A benchmark's build in a process of its own: the worker prints one JSON line last, the
benchmark reads it. Peak RSS is then the build's own."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys


def print_result(report, seconds: float) -> None:
    """The worker's last line: pages embedded, seconds, exit code and its peak RSS."""
    print(json.dumps({"pages": report.pages_embedded, "seconds": seconds, "exit": int(report.exit_code),
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run_worker(command: list[str], label: str) -> dict:
    """Run a worker offline and return what it printed; stop the benchmark if its build failed."""
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        sys.exit(f"{label} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["exit"] != 0:
        sys.exit(f"{label}: build exit code {result['exit']}")
    return result
