#!/usr/bin/env python3
"""What the CPU scorer's compiled kernel costs a fresh process to load, and what it saves a page row
against torch's exact path: the numbers index/scoring/kernel_policy.py decides by (PAYS_FROM, PAYS_FROM_STARTED,
ROW_TOKENS). Each measurement in a fresh process of its own; the scorers' rounds interleaved.

- load, cold: a process with torch and scipy.linalg imported (as a model's load leaves it), numba not started;
- load, numba started: after a first compiled call of another numba function (the first pass's hamming kernel);
- saving: one query of 20 tokens and 8 stacked queries of 20, over `--pages` pages of 1,030 x 128 float16
  vectors, by torch's path and by the kernel (wall, the scorer's threads), best of `--rounds`.

    python scripts/bench_kernel_load.py                    # 1,000 pages, 5 rounds
    python scripts/bench_kernel_load.py --pages 500 --rounds 3 --loads 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOAD = """
import json, sys, time
import numpy as np, torch, scipy.linalg  # what a model's load imports anyway
from localgpt_index.index import score
if sys.argv[1] == "started":
    from localgpt_index.index.scoring.codes.kernel import hamming_maxsim
    words, offsets = np.zeros((16, 2), dtype=np.uint64), np.array([0, 8, 16], dtype=np.int64)
    hamming_maxsim(np.zeros((2, 4), dtype=np.uint64), np.zeros(4, dtype=np.int64), 1, words, offsets)
started = time.perf_counter()
assert score.compiled_kernel() is not None
print(json.dumps({"load_s": time.perf_counter() - started}))
"""

SAVING = """
import json, sys, time
import numpy as np, torch
from localgpt_index.index import score
from localgpt_index.index.scoring.kernel_policy import KernelPolicy
pages, rounds = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
vectors = rng.standard_normal((pages * 1030, 128), dtype=np.float32)
vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float16)
offsets = np.arange(pages + 1, dtype=np.int64) * 1030
paths = {"torch": KernelPolicy.fixed(None), "kernel": KernelPolicy.fixed(score.compiled_kernel())}
out = {}
for stacked in (1, 8):
    queries = [rng.standard_normal((20, 128), dtype=np.float32) for _ in range(stacked)]
    spent = {name: [] for name in paths}
    for number in range(rounds + 1):  # the first round warms both paths up
        for name in (list(paths) if number % 2 else list(paths)[::-1]):
            score.kernel_policy = paths[name]
            started = time.perf_counter()
            score.maxsim(queries, vectors, offsets)
            if number:
                spent[name].append(time.perf_counter() - started)
    out[stacked] = {name: min(times) for name, times in spent.items()}
print(json.dumps({"rows": len(vectors), "times": out}))
"""


def fresh(code: str, *args: object) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from localgpt_index.index.scoring import kernel_policy as policy

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loads", type=int, default=3, help="fresh processes that time each load")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    loads = {kind: [fresh(LOAD, kind)["load_s"] for _ in range(args.loads)] for kind in ("cold", "started")}
    for kind, times in loads.items():
        print(f"load, {kind}: median {statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})")
    saving = fresh(SAVING, args.pages, args.rounds)
    rows = saving["rows"]
    per_unit = []
    for stacked, times in saving["times"].items():
        tokens = 20 * int(stacked)
        saved = (times["torch"] - times["kernel"]) / rows
        per_unit.append(saved / (tokens + policy.ROW_TOKENS))
        print(f"{tokens:4d} query tokens over {rows:,} rows: torch {times['torch'] * 1e3:.0f} ms, kernel {times['kernel'] * 1e3:.0f} ms; "
              f"saved {saved * 1e9:.0f} ns a row, {per_unit[-1] * 1e9:.2f} ns a unit (rows x (tokens + {policy.ROW_TOKENS}))")
    unit = statistics.median(per_unit)
    for kind, constant in (("cold", policy.PAYS_FROM), ("started", policy.PAYS_FROM_STARTED)):
        pays = statistics.median(loads[kind]) / unit if unit > 0 else float("inf")
        print(f"break-even, {kind}: {pays / 1e6:,.0f} M units (20 tokens: {pays / (1030 * (20 + policy.ROW_TOKENS)):,.0f} pages); "
              f"kernel_policy uses {constant / 1e6:,.0f} M")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
