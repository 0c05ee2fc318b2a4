#!/usr/bin/env python3
"""Repeated `lgpt-index query` calls from a shell: cold (no service) against warm (after `--keep-warm`).

On a random-weight checkpoint of localgpt_index/testing/checkpoints.py ("bench": real ColPali geometry,
small widths; `--spec cpu`: wider layers, a model-bound one), an index of `--pdfs` PDFs x 10 pages:

1. `--calls` consecutive `lgpt-index query --mode visual --json` processes, whole process each (start to
   exit, as a shell sees it), with `--no-warm`; then one `--keep-warm` call, `lgpt-index warm` to wait for
   its model, and `--calls` more without it (answered by the service). Medians, min-max, the ratio; every
   warm answer compared byte for byte with the cold one of the same query.
2. A cold call's breakdown: `-X importtime`'s top-level imports, and the query's own stages from
   `-v` timers (model load, first encoding, scoring), against its whole time.

    python scripts/bench_cli.py                    # 20 + 20 calls, 20 PDFs
    python scripts/bench_cli.py --calls 5 --pdfs 5 --json

Targets (issue 45): a warm call at most 0.3 s, and at least 10x faster than a cold one. The machine's
load matters: say how many cores were shared with what.
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
                          env=env or ENV, check=False)
    return time.perf_counter() - started, done


def calls(index: Path, count: int, *extra: str) -> tuple[list[float], list[str], int]:
    """`count` query processes: their times, their outputs, and how many a warm service answered (-v says)."""
    seconds, outputs, warm = [], [], 0
    for i in range(count):
        took, done = lgpt("query", QUESTIONS[i % len(QUESTIONS)], "--mode", "visual", "--json", "-v", "--index-dir", str(index),
                          *extra)
        if done.returncode != 0:
            raise SystemExit(f"query failed ({done.returncode}): {done.stderr}")
        seconds.append(took)
        outputs.append(done.stdout)
        warm += "answered by the warm service" in done.stderr
    return seconds, outputs, warm


def summary(seconds: list[float]) -> dict:
    return {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3), "max_s": round(max(seconds), 3)}


def breakdown(index: Path) -> dict:
    """One cold call: its top-level imports (-X importtime, cumulative), and its whole time."""
    took, done = lgpt("query", QUESTIONS[0], "--mode", "visual", "--json", "--no-warm", "--index-dir", str(index),
                      env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"})
    imports: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        if not cumulative.isdigit():
            continue
        top = name.split(".")[0]
        if name == top or name.startswith("localgpt_index.") and name.count(".") == 2:
            imports[name] = max(imports.get(name, 0.0), int(cumulative) / 1e6)
    heaviest = dict(sorted(imports.items(), key=lambda item: -item[1])[:12])
    stages = _stages(index)
    return {"whole_s": round(took, 3), "imports_s": {name: round(s, 3) for name, s in heaviest.items()}, "stages_s": stages}


def _stages(index: Path) -> dict:
    """The query's own stages, timed in one process: imports of the model libraries, the index's open, the
    model's load, the first encoding, the scoring."""
    code = f"""
import json, time
t = {{}}
s = time.perf_counter()
import torch, transformers  # noqa: F401
t["import torch+transformers"] = time.perf_counter() - s
from localgpt_index.query.search import open_index
from localgpt_index.query.request import QueryRequest
s = time.perf_counter(); index = open_index({str(index)!r}); t["open index"] = time.perf_counter() - s
s = time.perf_counter(); encoder = index.load_encoder(); t["model load"] = time.perf_counter() - s
s = time.perf_counter(); vectors = encoder.encode_queries([{QUESTIONS[0]!r}]); t["first encoding"] = time.perf_counter() - s
request = QueryRequest(queries=({QUESTIONS[0]!r},), mode="visual")
s = time.perf_counter(); index.search_encoded(request, vectors); t["scoring (no kernel)"] = time.perf_counter() - s
from localgpt_index.index.scoring import maxsim
s = time.perf_counter(); maxsim.kernel_policy.load(); t["kernel load (skipped by one-shot queries)"] = time.perf_counter() - s
print(json.dumps({{k: round(v, 3) for k, v in t.items()}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=False)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--pdfs", type=int, default=20)
    parser.add_argument("--spec", default="bench", help="checkpoint spec (bench; cpu: model-bound)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from docgen import make_pdf

    from localgpt_index.testing.checkpoints import make_checkpoint

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = make_checkpoint(tmp / f"{args.spec}-colpali", args.spec)
        docs, index = tmp / "docs", tmp / "idx"
        for i in range(args.pdfs):
            make_pdf(docs / f"report-{i:03d}.pdf", [f"Report {i} page {p} revenue outlook" for p in range(10)])
        took, built = lgpt("build", str(docs), "--model", str(model), "--index-dir", str(index), "-q")
        if built.returncode != 0:
            raise SystemExit(f"build failed: {built.stderr}")
        cold, cold_out, _ = calls(index, args.calls, "--no-warm")
        lgpt("query", QUESTIONS[0], "--mode", "visual", "--json", "--index-dir", str(index), "--keep-warm", "600")
        ready = lgpt("warm", "--index-dir", str(index), "--json")[1]
        status = json.loads(ready.stdout)
        warm, warm_out, answered = calls(index, args.calls)
        identical = all(a == b for a, b in zip(cold_out, warm_out))
        idle = json.loads(lgpt("warm", "--status", "--json", "--index-dir", str(index))[1].stdout)
        lgpt("warm", "--stop", "--index-dir", str(index))
        result = {
            "spec": args.spec, "pages": args.pdfs * 10, "calls": args.calls, "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cold": summary(cold), "warm": summary(warm),
            "ratio": round(statistics.median(cold) / statistics.median(warm), 1),
            "identical_output": identical, "answered_warm": answered,
            "service": {"pid": status["pid"], "rss_mib": round((idle["rss_bytes"] or 0) / 2**20), "cpu_s": idle["cpu_s"]},
            "cold_breakdown": breakdown(index),
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.calls} calls each, {result['pages']} pages, checkpoint {args.spec}, {result['cpus']} CPUs, "
              f"load average {result['load_average']}")
        for name in ("cold", "warm"):
            s = result[name]
            print(f"  {name:5} median {s['median_s']:.3f} s  (min {s['min_s']:.3f}, max {s['max_s']:.3f})")
        print(f"  ratio {result['ratio']}x; outputs identical: {identical}; {answered} of {args.calls} answered warm; "
              f"service {result['service']}")
        print(f"  cold call breakdown: {json.dumps(result['cold_breakdown'], indent=2)}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
