#!/usr/bin/env python3
"""Query speed: lgpt-index's exact MaxSim against colpali-engine's processor.score (what byaldi calls).

A synthetic index of N pages x 1030 vectors x 128 dimensions (unit-norm, float16,
written through the real store) and 20-token queries. byaldi scores one query
per call over a list of page tensors; colpali-engine gets float32 tensors, its
fastest dtype on a CPU. lgpt-index runs in a process of its own: it opens the index
from disk (memory-mapped, checksums verified), scores one query per call, then a
batch of queries in one call (what `lgpt-index query A B C` and --queries-file do).

    python scripts/bench_query.py                 # N = 1,000 and 10,000
    python scripts/bench_query.py --pages 2000
    python scripts/bench_query.py --pages 2000 --baseline 31bee69 --rounds 5
    python scripts/bench_query.py --quick --json    # a smoke run (the fast tests call it)

With --baseline REV, that commit's lgpt-index (a git worktree of it, in a temporary folder)
writes the same index and runs the same measurement, interleaved with this tree's in
`--rounds` rounds (the order alternating): this machine's speed drifts, so a ratio is only
as good as the rounds it comes from; the median ratio and its spread (min-max) are printed.

Prints queries/s for each, their ratios, the time to open the index and to the
first result, and the scorer against this machine's limit: the streaming read rate and the
matrix-product peak (float32, the scorer's precision, and bfloat16), measured in the same process
in interleaved rounds with the scorer's time for one query and for 8 stacked; the limit of each
is the larger of reading its bytes at that rate and doing its multiply-adds at that peak, and
the scorer's time is printed as a percentage of it. Exits 1 only if two of them disagree on a top-10.
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKENS = 1030
DIM = 128
PAGES_PER_DOC = 10
SEED = 0

# Run in each tree (this one, or a baseline's worktree): that tree's own make_index writes the index.
MAKE = """
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from bench_query import make_index
make_index(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
"""

# lgpt-index's side of one round, in a fresh process: import, open, the first query (model loading
# is not part of it), then queries/s one per call, batched, and with the lossy first pass.
MEASURE = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
try:
    from localgpt_index.query.search import open_index
except ImportError:  # a tree from before the packages (31bee69 and older)
    from localgpt_index.search import open_index
try:
    import torch  # noqa: F401 - its import time is part of a user's
except ImportError:  # the torch-free tier (--quick in the fast tests): NumPy scores
    pass
t1 = time.perf_counter()
index = open_index(sys.argv[1])
t2 = time.perf_counter()
queries = list(np.load(sys.argv[2]))
single_count, batch, first_passes = int(sys.argv[3]), int(sys.argv[4]), [int(c) for c in sys.argv[5:]]
index.search_vectors(queries[:1], k=10)
t3 = time.perf_counter()
try:  # the queries/s below as a long-lived process scores (serve loads the compiled kernel at start); not timed
    try:
        from localgpt_index.index.scoring.maxsim import kernel_policy
    except ImportError:  # a tree from before 0.4's layout
        from localgpt_index.index.score import kernel_policy
    if "torch" in sys.modules:
        kernel_policy.load()
except ImportError:  # a tree from before the kernel's policy (1282003 and older have no kernel)
    pass
def top(hits):
    return [[h.path, h.page] for h in hits]
started = time.perf_counter()
single = [top(index.search_vectors([q], k=10)[0]) for q in queries[:single_count]]
single_qps = single_count / (time.perf_counter() - started)
started = time.perf_counter()
exact = index.search_vectors(queries[:batch], k=10)
batch_qps = batch / (time.perf_counter() - started)
first_pass = {}
for candidates in first_passes:
    started = time.perf_counter()
    index.search_vectors(queries[:1], 10, "cpu", None, candidates)  # builds the sign codes once (positional: every tree's order)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    approx = index.search_vectors(queries[:batch], 10, "cpu", None, candidates)
    qps = batch / (time.perf_counter() - started)
    recall = float(np.mean([len({(h.path, h.page) for h in a} & {(h.path, h.page) for h in b}) / 10
                            for a, b in zip(exact, approx)]))
    first_pass[candidates] = [qps, recall, build_s]
print(json.dumps({"imports_s": t1 - t0, "open_s": t2 - t1, "score_s": t3 - t2, "single_qps": single_qps,
                  "batch_qps": batch_qps, "first_pass": first_pass, "single": single, "batch": [top(h) for h in exact]}))
"""

# The scorer against the machine's limit, in one process of this tree, in interleaved rounds: the
# streaming read rate (a sum over a buffer far bigger than the caches), the matrix-product peak in
# float32 and bfloat16 (a large product on all cores), one query and 8 stacked through the index.
LIMIT = """
import json, sys, time
import numpy as np
from localgpt_index.query.search import open_index
from localgpt_index.index.scoring.maxsim import kernel_policy, torch_available
index = open_index(sys.argv[1])
if torch_available():
    kernel_policy.load()  # the warm scorer, as a long-lived process has it (a one-shot one scores by torch's path)
queries = list(np.load(sys.argv[2]))
rounds, buffer_mib, side = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def best_of(work, times=3, cpu=None, key=None):
    spent, used = [], []
    for _ in range(times):
        started, started_cpu = time.perf_counter(), time.process_time()
        work()
        spent.append(time.perf_counter() - started)
        used.append(time.process_time() - started_cpu)
    if cpu is not None:
        cpu[key] = min(used)  # the process's CPU time (all its threads): robust where other work shares the cores
    return min(spent)
if torch_available():
    import torch
    engine = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    buffer = torch.ones(buffer_mib << 18, dtype=torch.float32)
    read = lambda: float(buffer.sum())
    a, b = torch.randn(side, side), torch.randn(side, side)
    a16, b16 = a.bfloat16(), b.bfloat16()
    products = {"float32": lambda: a @ b, "bfloat16": lambda: a16 @ b16}
else:
    engine = "NumPy (torch not installed)"
    buffer = np.ones(buffer_mib << 18, dtype=np.float32)
    read = lambda: float(buffer.sum())
    a = np.random.default_rng(0).standard_normal((side, side), dtype=np.float32)
    products = {"float32": lambda: a @ a}
vectors = sum(index.store.segment_arrays(s)[0].nbytes for s in index.manifest.segments.values())
rows = vectors // (2 * queries[0].shape[1])
runs = []
for _ in range(rounds):
    run = {"read_gb_s": buffer_mib * 2**20 / best_of(read) / 1e9}
    run["cpu_s"] = {}
    run["peak_gflop_s"] = {name: 2 * side**3 / best_of(work, cpu=run["cpu_s"], key=name) / 1e9 for name, work in products.items()}
    run["peak_gflop"] = 2 * side**3 / 1e9
    for stacked in (1, 8):
        index.search_vectors(queries[:stacked], k=10)
        run[f"scorer_{stacked}_s"] = best_of(lambda: index.search_vectors(queries[:stacked], k=10), cpu=run["cpu_s"],
                                             key=f"scorer_{stacked}")
    runs.append(run)
print(json.dumps({"engine": engine, "bytes": int(vectors), "rows": int(rows), "runs": runs}))
"""

# as `serve` runs (serve/service.py): torch's idle OpenMP workers, after the read and the peak on all
# cores, would otherwise spin for milliseconds beside the scorer's threads
QUIET_OPENMP = {"GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT", "1000")}


def limits(measured: dict, tokens: int, dim: int = DIM) -> dict:
    """The limit of one query and of 8 stacked, each round: the larger of reading the vectors at the
    streaming rate and doing the multiply-adds at the float32 peak (the scorer's precision)."""
    out: dict = {"engine": measured["engine"], "bytes": measured["bytes"]}
    for stacked in (1, 8):
        flop = 2 * stacked * tokens * dim * measured["rows"]
        rounds = []
        for run in measured["runs"]:
            read_s = measured["bytes"] / (run["read_gb_s"] * 1e9)
            compute_s = flop / (run["peak_gflop_s"]["float32"] * 1e9)
            limit = max(read_s, compute_s)
            # the same share in CPU time: the multiply-adds at the float32 peak's CPU seconds per GFLOP,
            # against the scorer's CPU seconds (both the whole process's, all threads)
            peak_cpu_s = flop / 1e9 * run["cpu_s"]["float32"] / run["peak_gflop"]
            scorer_cpu_s = run["cpu_s"][f"scorer_{stacked}"]
            rounds.append({"read_s": read_s, "compute_s": compute_s, "limit_s": limit,
                           "scorer_s": run[f"scorer_{stacked}_s"], "percent": 100 * limit / run[f"scorer_{stacked}_s"],
                           "peak_cpu_s": peak_cpu_s, "scorer_cpu_s": scorer_cpu_s, "cpu_percent": 100 * peak_cpu_s / scorer_cpu_s})
        out[f"{stacked}_stacked"] = {"gflop": flop / 1e9, "rounds": rounds}
    out["read_gb_s"] = [run["read_gb_s"] for run in measured["runs"]]
    out["peak_gflop_s"] = {name: [run["peak_gflop_s"][name] for run in measured["runs"]] for name in measured["runs"][0]["peak_gflop_s"]}
    return out


def show_limits(found: dict, pages: int, tokens: int) -> None:
    def span(values: list[float], fmt: str = "{:.1f}") -> str:
        text = fmt.format(statistics.median(values))
        return text if len(values) == 1 else f"{text} ({fmt.format(min(values))}-{fmt.format(max(values))})"

    rounds = len(found["read_gb_s"])
    say(f"  the scorer against this machine's limit ({found['engine']}; {rounds} interleaved round(s), median (min-max), "
        f"each the best of 3):")
    peaks = ", ".join(f"{name} {span(values, '{:.0f}')} GFLOP/s" for name, values in found["peak_gflop_s"].items())
    say(f"    streaming read {span(found['read_gb_s'])} GB/s; matrix-product peak {peaks} (the scorer multiplies in float32)")
    for stacked in (1, 8):
        part = found[f"{stacked}_stacked"]
        rounds_ = part["rounds"]
        compute_s, read_s = (statistics.median(r[key] for r in rounds_) for key in ("compute_s", "read_s"))
        bound = "compute" if compute_s > read_s else "read"
        say(f"    {stacked} {'query' if stacked == 1 else 'stacked queries'} of {tokens} tokens over {pages:,} pages: "
            f"{found['bytes'] / 1e9:.2f} GB, {part['gflop']:.1f} GFLOP; limit {span([1000 * r['limit_s'] for r in rounds_], '{:.0f}')} ms "
            f"({bound}-bound), scorer {span([1000 * r['scorer_s'] for r in rounds_], '{:.0f}')} ms: "
            f"{span([r['percent'] for r in rounds_], '{:.0f}')} % of the limit (target 60 %)")
        say(f"      in CPU time: scorer {span([1000 * r['scorer_cpu_s'] for r in rounds_], '{:.0f}')} CPU-ms, its multiply-adds at "
            f"the float32 peak {span([1000 * r['peak_cpu_s'] for r in rounds_], '{:.0f}')} CPU-ms: "
            f"{span([r['cpu_percent'] for r in rounds_], '{:.0f}')} %")


def say(line: str) -> None:
    """Human output: stdout, or stderr when --json owns stdout."""
    print(line, file=sys.stderr if JSON_OUT else sys.stdout)


JSON_OUT = False


def unit(rng, rows: int) -> np.ndarray:
    v = rng.standard_normal((rows, DIM), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_index(index_dir: Path, pages: int, seed: int = SEED) -> None:
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore

    rng = np.random.default_rng(seed)
    store = LocalStore(index_dir / "default")
    with store.begin() as txn:
        segment = txn.write_segment((unit(rng, TOKENS).astype(np.float16) for _ in range(pages)), DIM)
        documents = [
            Document(path=f"/bench/doc-{d:06d}.pdf", sha256=f"{d:064x}", size=1, kind="pdf", pages=PAGES_PER_DOC,
                     spans=[Span(segment=segment.id, first=d * PAGES_PER_DOC, pages=PAGES_PER_DOC)])
            for d in range(pages // PAGES_PER_DOC)
        ]
        txn.commit(documents, ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))


def in_tree(tree: Path, script: str, *args: str, env: dict | None = None) -> str:
    """Run `script` with `tree`'s lgpt-index first on the path (`python -c` puts its working directory first)."""
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=tree, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"{tree}: {done.stderr[-3000:]}")
    return done.stdout


def measure(tree: Path, index_dir: Path, queries: Path, single: int, batch: int, first_passes: tuple[str, ...]) -> dict:
    return json.loads(in_tree(tree, MEASURE, str(index_dir), str(queries), str(single), str(batch), *first_passes)
                      .strip().splitlines()[-1])


def their_scores(pages: int, queries: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """colpali-engine's score_multi_vector, one query per call, over the same page vectors (float32)."""
    import torch
    from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

    rng = np.random.default_rng(SEED)  # the pages make_index wrote, in its order
    page_tensors = [torch.from_numpy(unit(rng, TOKENS).astype(np.float16).astype(np.float32)) for _ in range(pages)]
    started = time.perf_counter()
    scores = [BaseVisualRetrieverProcessor.score_multi_vector([torch.from_numpy(q)], page_tensors, device="cpu")[0].numpy()
              for q in queries]
    return len(queries) / (time.perf_counter() - started), scores


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}x-{max(values):.2f}x)"


def bench(pages: int, batch: int, baseline_queries: int, tokens: int, baseline: Path | None, rounds: int,
          limit_rounds: int, quick: bool) -> tuple[bool, dict]:
    rng = np.random.default_rng(1)
    queries = [unit(rng, tokens) for _ in range(max(batch, baseline_queries, 8))]
    first_passes = () if quick else ("100", "1000")
    trees = {"this tree": ROOT, **({f"baseline {baseline.name.removeprefix('baseline-')}": baseline} if baseline else {})}
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-query-") as tmp:
        np.save(Path(tmp) / "q.npy", np.stack(queries))
        for number, tree in enumerate(trees.values()):
            in_tree(tree, MAKE, f"{tmp}/idx-{number}", str(pages), str(SEED))
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for round_number in range(rounds):
            order = list(enumerate(trees.items()))
            for number, (name, tree) in order if round_number % 2 == 0 else order[::-1]:
                runs[name].append(measure(tree, Path(f"{tmp}/idx-{number}"), Path(tmp) / "q.npy", baseline_queries, batch,
                                          first_passes))
        buffer_mib, side = (128, 512) if quick else (1024, 2048)
        measured = json.loads(in_tree(ROOT, LIMIT, f"{tmp}/idx-0", str(Path(tmp) / "q.npy"), str(limit_rounds),
                                      str(buffer_mib), str(side), env=QUIET_OPENMP).strip().splitlines()[-1])
    found = limits(measured, tokens)
    ours = runs["this tree"]
    rounds_said = f", median of {rounds} rounds" if rounds > 1 else ""
    say(f"N = {pages:,} pages x {TOKENS} x {DIM}, {tokens}-token queries{rounds_said}")
    single_qps = statistics.median(r["single_qps"] for r in ours)
    batch_qps = statistics.median(r["batch_qps"] for r in ours)
    report: dict = {"pages": pages, "tokens": tokens, "single_qps": single_qps, "batch": batch, "batch_qps": batch_qps,
                    "limit": found}
    agree = True
    try:
        their_qps, theirs = their_scores(pages, queries[:baseline_queries])
    except ImportError as exc:  # torch or colpali-engine not installed (the fast test tier)
        say(f"  colpali-engine processor.score: not run ({exc})")
        their_qps, theirs = None, []
    for hits, scores in zip(ours[0]["single"], theirs):
        ours_top = [int(path[-10:-4]) * PAGES_PER_DOC + page - 1 for path, page in hits]
        agree &= ours_top == list(np.argsort(-scores, kind="stable")[:10])
    if their_qps:
        say(f"  colpali-engine processor.score, 1 query per call: {their_qps:8.2f} queries/s")
        say(f"  lgpt-index, 1 query per call:                     {single_qps:8.2f} queries/s  ({single_qps / their_qps:.1f}x)")
        say(f"  lgpt-index, {batch} queries per call:                   {batch_qps:8.2f} queries/s  ({batch_qps / their_qps:.1f}x)")
        say(f"  top-10 identical to colpali-engine's on {baseline_queries} queries: {'yes' if agree else 'NO'}")
        report.update(colpali_qps=their_qps, colpali_top10_identical=agree)
    else:
        say(f"  lgpt-index: 1 query per call {single_qps:.2f} queries/s, {batch} per call {batch_qps:.2f} queries/s")
    show_limits(found, pages, tokens)
    report["first_pass"] = {}
    for candidates in first_passes:
        qps, recall, build_s = (statistics.median(r["first_pass"][candidates][i] for r in ours) for i in range(3))
        report["first_pass"][candidates] = {"qps": qps, "recall_at_10": recall, "first_call_s": build_s}
        say(f"  lossy first pass (--first-pass {candidates}), {batch} queries: {qps:8.2f} queries/s "
            f"({qps / batch_qps:.2f}x exact batched), recall@10 {recall:.0%}; first call {build_s:.1f} s")
    timing = {key: statistics.median(r[key] for r in ours) for key in ("imports_s", "open_s", "score_s")}
    report["fresh_process"] = timing
    say(f"  fresh process: imports {timing['imports_s']:.2f} s, open (checksums included) {timing['open_s']:.2f} s, "
        f"first query {timing['score_s']:.2f} s; time to first result after imports {timing['open_s'] + timing['score_s']:.2f} s")
    for name in list(trees)[1:]:
        before = runs[name]
        same = all(a["single"] == b["single"] and a["batch"] == b["batch"] for a, b in zip(ours, before))
        agree &= same

        # a rate: this / baseline; a time: baseline / this
        def ratio(key: str, faster: bool = True, before: list[dict] = before) -> str:
            return spread([a[key] / b[key] if faster else b[key] / a[key] for a, b in zip(ours, before)])

        say(f"  this tree / {name}, {rounds} interleaved rounds, median (min-max), above 1 is faster here: "
            f"1 query per call {ratio('single_qps')}, {batch} per call {ratio('batch_qps')}, "
            f"open {ratio('open_s', False)}, first query {ratio('score_s', False)}, imports {ratio('imports_s', False)}; "
            f"top-10s identical: {'yes' if same else 'NO'}")
        say("    per round, 1 query per call (this tree, baseline): "
            + ", ".join(f"{a['single_qps']:.2f}/{b['single_qps']:.2f}" for a, b in zip(ours, before)))
    report["agree"] = agree
    return agree, report


def main() -> None:
    global JSON_OUT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, nargs="+", default=None, help="index sizes (default 1,000 and 10,000; --quick 200)")
    parser.add_argument("--batch", type=int, default=16, help="queries per call in the batched run")
    parser.add_argument("--baseline-queries", type=int, default=3)
    parser.add_argument("--query-tokens", type=int, default=20)
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="a git commit whose lgpt-index runs the same measurement, interleaved with this tree's")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every tree's measurement (the median and spread)")
    parser.add_argument("--limit-rounds", type=int, default=None,
                        help="interleaved rounds of read rate, peaks and scorer for the limit (default 3; --quick 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 pages, small buffers, one round")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout (the text goes to stderr)")
    parser.add_argument("--real", type=Path, default=None, metavar="INDEX",
                        help="an index built by a model from rendered pages (e.g. the tiny checkpoint's): the first pass's "
                             "recall@10 against exact on its vectors, at 100, 300 and 1,000 candidates (bench_first_pass.py)")
    args = parser.parse_args()
    JSON_OUT = args.json
    pages = args.pages or ([200] if args.quick else [1000, 10000])
    limit_rounds = args.limit_rounds or (1 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-baseline-") as tmp:
        baseline = None
        if args.baseline:
            baseline = Path(tmp) / f"baseline-{args.baseline}"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline],
                           check=True, capture_output=True)
        try:
            results = [bench(n, args.batch, args.baseline_queries, args.query_tokens, baseline, max(1, args.rounds),
                             limit_rounds, args.quick) for n in pages]  # every N, even after a disagreement
            ok = all(agree for agree, _ in results)
        finally:
            if baseline is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], capture_output=True,
                               check=False)
    document = {"ok": ok, "sizes": [report for _, report in results]}
    if args.real:
        sys.path.insert(0, str(ROOT / "scripts"))
        from bench_first_pass import real

        document["first_pass_real"] = found = real(args.real, [100, 300, 1000], 30)
        say(f"first pass on {found['pages']:,} pages of {args.real}: recall@10 against exact "
            + ", ".join(f"C={c}: {v:.2f}" for c, v in found["recall_at_10"].items()))
    if args.json:
        print(json.dumps(document, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
