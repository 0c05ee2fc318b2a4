#!/usr/bin/env python3
"""Repeated `lgpt-index query` calls from a shell: cold (no service) against warm (after `--keep-warm`).

On random-weight checkpoints of localgpt_index/testing/checkpoints.py: "bench" (real ColPali geometry,
small widths) and "cpu" (wider layers: model-bound, as in scripts/bench_build.py), an index of `--pdfs`
PDFs x 10 pages each:

1. `--calls` consecutive `lgpt-index query --mode visual --json` processes, whole process each (start to
   exit, as a shell sees it), with `--no-warm`; then one `--keep-warm` call, `lgpt-index warm` to wait for
   its model, and `--calls` more without it (answered by the service: its status counts them). Medians,
   min-max, the ratio; every warm answer compared byte for byte with the cold one of the same query.
2. A cold call's breakdown: the stages of a cold query, timed in one process, wall and CPU seconds
   (the CLI's imports, the query modules, the index's open, torch, transformers, colpali-engine, byaldi,
   the model's load, the first encoding, the scoring), and a warm call's (`-X importtime`: its imports).

    python scripts/bench_cli.py                        # 20 + 20 calls, 20 PDFs, both checkpoints
    python scripts/bench_cli.py --calls 5 --pdfs 5 --spec bench --json
    python scripts/bench_cli.py --spec bench --baseline ../main   # also the warm calls of another checkout's client

Targets (issue 45): a warm call at most 0.3 s, and at least 10x faster than a cold one. The machine's
load matters (the load average is printed): run it twice and say how many cores were shared with what.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
QUESTIONS = ["quarterly revenue growth", "invoice total amount", "market outlook", "hiring plan budget", "customers margin"]


def lgpt(*args: str, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "localgpt_index", *args], capture_output=True, text=True,
                          env=env or ENV, check=False, cwd=tempfile.gettempdir())  # (not a checkout: `-m` imports from it)
    return time.perf_counter() - started, done


def calls(index: Path, count: int, *extra: str, env: dict | None = None) -> tuple[list[float], list[str], list[int]]:
    """`count` query processes, as a script runs them (no -v): their times, their outputs, and the calls a
    warm service of the index did not answer (its count of answers, read after each call)."""
    seconds, outputs, here = [], [], []
    for i in range(count):
        answered = warm_answered(index)
        took, done = lgpt("query", QUESTIONS[i % len(QUESTIONS)], "--mode", "visual", "--json", "--index-dir", str(index), *extra,
                          env=env)
        if done.returncode != 0:
            raise SystemExit(f"query failed ({done.returncode}): {done.stderr}")
        seconds.append(took)
        outputs.append(done.stdout)
        if warm_answered(index) == answered:
            here.append(i)
    return seconds, outputs, here


def warm_status(index: Path) -> dict:
    return json.loads(lgpt("warm", "--status", "--json", "--index-dir", str(index))[1].stdout)


def warm_answered(index: Path) -> int:
    """How many queries the warm service of `index` answered so far (0: none runs)."""
    from localgpt_index.serve.warm import STATUS_PATH, call

    answer = call(index / "default", "GET", STATUS_PATH)
    return answer[1].get("answered", 0) if answer is not None and answer[0] == 200 else 0


def summary(seconds: list[float]) -> dict:
    return {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3), "max_s": round(max(seconds), 3)}


def breakdown(index: Path) -> dict:
    """A cold query's stages (wall and CPU seconds, in one process), and its whole time as a command."""
    took, _ = lgpt("query", QUESTIONS[0], "--mode", "visual", "--json", "--no-warm", "--index-dir", str(index))
    done = subprocess.run([sys.executable, "-c", STAGES, str(index), QUESTIONS[0]], capture_output=True, text=True, env=ENV,
                          check=False)
    stages = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-500:]}
    return {"whole_s": round(took, 3), "stages_wall_cpu_s": stages}


def warm_imports(index: Path) -> dict:
    """A warm call's heaviest top-level imports (-X importtime, cumulative seconds), and its whole time."""
    took, done = lgpt("query", QUESTIONS[0], "--mode", "visual", "--json", "--index-dir", str(index),
                      env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"})
    imports: dict[str, float] = {}
    for line in done.stderr.splitlines():
        parts = line[len("import time:"):].split("|") if line.startswith("import time:") else []
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("  "):
            imports[parts[2].strip()] = int(parts[1]) / 1e6
    heaviest = dict(sorted(imports.items(), key=lambda item: -item[1])[:10])
    return {"whole_s": round(took, 3), "imports_s": {name: round(s, 3) for name, s in heaviest.items()}}


# A cold query's stages in one process: each import in the order the query makes it, then the work.
STAGES = """
import json, sys, time
t, at = {}, [time.perf_counter(), time.process_time()]
def mark(name):
    now = [time.perf_counter(), time.process_time()]
    t[name] = [round(now[0] - at[0], 3), round(now[1] - at[1], 3)]
    at[:] = now
import localgpt_index.cli
mark("CLI imports")
from localgpt_index.query.search import open_index
from localgpt_index.query.request import QueryRequest
mark("query modules (numpy, pydantic, the store)")
index = open_index(sys.argv[1])
mark("open the index")
import torch
mark("import torch")
import transformers
from transformers.models.paligemma import modeling_paligemma
mark("import transformers (PaliGemma)")
import colpali_engine.models
mark("import colpali-engine (every family)")
from localgpt_index.models.loaders import byaldi_model_class
byaldi_model_class()
mark("import byaldi")
encoder = index.load_encoder()
mark("model load (weights, processor)")
vectors = encoder.encode_queries([sys.argv[2]])
mark("first encoding")
index.search_encoded(QueryRequest(queries=(sys.argv[2],), mode="visual"), vectors)
mark("scoring")
print(json.dumps(t))
"""


def bench(spec: str, calls_n: int, pdfs: int, tmp: Path, baseline: Path | None = None) -> dict:
    """Cold and warm calls on an index of `pdfs` PDFs built with the `spec` checkpoint."""
    from docgen import make_pdf

    from localgpt_index.testing.checkpoints import make_checkpoint

    model = make_checkpoint(tmp / f"{spec}-colpali", spec)
    docs, index = tmp / f"docs-{spec}", tmp / f"idx-{spec}"
    for i in range(pdfs):
        make_pdf(docs / f"report-{i:03d}.pdf", [f"Report {i} page {p} revenue outlook" for p in range(10)])
    built = lgpt("build", str(docs), "--model", str(model), "--index-dir", str(index), "-q")[1]
    if built.returncode != 0:
        raise SystemExit(f"build failed: {built.stderr}")
    cold, cold_out, _ = calls(index, calls_n, "--no-warm")
    lgpt("query", QUESTIONS[0], "--mode", "visual", "--json", "--index-dir", str(index), "--keep-warm", "600")
    lgpt("warm", "--index-dir", str(index), "--json")  # waits for the model
    warm, warm_out, here = calls(index, calls_n)
    after = warm_status(index)
    identical = all(a == b for a, b in zip(cold_out, warm_out))
    if baseline is not None:  # the same warm calls from another checkout (its client), of the same service
        before_client = calls(index, calls_n, env={**ENV, "PYTHONPATH": str(baseline)})[0]  # (its -v is not asked)
    result = {
        "spec": spec, "pages": pdfs * 10, "calls": calls_n, "load_average": [round(x, 2) for x in os.getloadavg()],
        "cold": summary(cold), "warm": summary(warm), "ratio": round(statistics.median(cold) / statistics.median(warm), 1),
        "identical_output": identical, "answered_warm": calls_n - len(here), "answered_here": here,
        "service": {"pid": after["pid"], "rss_mib": round((after["rss_bytes"] or 0) / 2**20), "cpu_s": after["cpu_s"]},
        "warm_call": warm_imports(index), "cold_breakdown": breakdown(index),
    }
    if baseline is not None:
        result["warm_baseline"] = {"checkout": str(baseline), **summary(before_client)}
    lgpt("warm", "--stop", "--index-dir", str(index))
    return result


def show(result: dict) -> None:
    print(f"checkpoint {result['spec']}: {result['calls']} calls each, {result['pages']} pages, {os.cpu_count()} CPUs, "
          f"load average {result['load_average']}")
    for name in ("cold", "warm"):
        s = result[name]
        print(f"  {name:5} median {s['median_s']:.3f} s  (min {s['min_s']:.3f}, max {s['max_s']:.3f})")
    if "warm_baseline" in result:
        s = result["warm_baseline"]
        print(f"  warm, {s['checkout']}'s client: median {s['median_s']:.3f} s  (min {s['min_s']:.3f}, max {s['max_s']:.3f})")
    print(f"  ratio {result['ratio']}x; outputs identical: {result['identical_output']}; {result['answered_warm']} of "
          f"{result['calls']} answered warm (here: calls {result['answered_here']}); service {result['service']}")
    print(f"  warm call: {json.dumps(result['warm_call'])}")
    print(f"  cold call: {result['cold_breakdown']['whole_s']} s; stages [wall, CPU] s:")
    for name, (wall, cpu) in result["cold_breakdown"]["stages_wall_cpu_s"].items():
        print(f"    {name:45} {wall:7.3f} {cpu:7.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--pdfs", type=int, default=20)
    parser.add_argument("--spec", default="bench,cpu", help="checkpoint specs, comma-separated (bench; cpu: model-bound)")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout whose client's warm calls are timed too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        for spec in args.spec.split(","):
            results.append(bench(spec, args.calls, args.pdfs, Path(tmp_name), args.baseline))
            if not args.json:
                show(results[-1])
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(r["identical_output"] and r["answered_warm"] == r["calls"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
