#!/usr/bin/env python3
"""Query speed: lgpt-index's exact MaxSim against colpali-engine's processor.score (what byaldi calls).

A synthetic index of N pages x 1030 vectors x 128 dimensions (unit-norm, float16,
written through the real store) and 20-token queries. byaldi scores one query
per call over a list of page tensors; colpali-engine gets float32 tensors, its
fastest dtype on a CPU. lgpt-index opens the index from disk (memory-mapped,
checksums verified) and scores one query per call, then a batch of queries in
one call (what `lgpt-index query A B C` and --queries-file do).

    python scripts/bench_query.py                 # N = 1,000 and 10,000
    python scripts/bench_query.py --pages 2000

Prints queries/s for each, their ratios, the time to open the index and to the
first result. Exits 1 only if the two disagree on a top-10.
"""

from __future__ import annotations

import argparse
import json
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


def unit(rng, rows: int) -> np.ndarray:
    v = rng.standard_normal((rows, DIM), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_index(index_dir: Path, pages: int, seed: int = 0) -> None:
    from localgpt_index.index.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.store import IndexStore

    rng = np.random.default_rng(seed)
    store = IndexStore(index_dir / "default")
    with store.begin() as txn:
        segment = txn.write_segment((unit(rng, TOKENS).astype(np.float16) for _ in range(pages)), DIM)
        documents = [
            Document(path=f"/bench/doc-{d:06d}.pdf", sha256=f"{d:064x}", size=1, kind="pdf", pages=PAGES_PER_DOC,
                     spans=[Span(segment=segment.id, first=d * PAGES_PER_DOC, pages=PAGES_PER_DOC)])
            for d in range(pages // PAGES_PER_DOC)
        ]
        txn.commit(documents, ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))


def first_result(index_dir: Path, query: np.ndarray) -> dict:
    """In a fresh process: import, open, score one query. Model loading is not part of it."""
    code = f"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from localgpt_index.query.search import open_index
import torch
t1 = time.perf_counter()
index = open_index({str(index_dir)!r})
t2 = time.perf_counter()
hits = index.search_vectors([np.load({str(index_dir / 'q.npy')!r})], k=10)
t3 = time.perf_counter()
print(json.dumps({{"imports_s": t1 - t0, "open_s": t2 - t1, "score_s": t3 - t2}}))
"""
    np.save(index_dir / "q.npy", query)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(pages: int, batch: int, baseline_queries: int, tokens: int) -> bool:
    import torch
    from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

    from localgpt_index.query.search import open_index

    rng = np.random.default_rng(1)
    queries = [unit(rng, tokens) for _ in range(max(batch, baseline_queries))]
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-query-") as tmp:
        index_dir = Path(tmp)
        make_index(index_dir, pages)
        timing = first_result(index_dir, queries[0])
        index = open_index(index_dir)

        started = time.perf_counter()
        single = [index.search_vectors([q], k=10)[0] for q in queries[:baseline_queries]]
        ours_single_qps = baseline_queries / (time.perf_counter() - started)
        started = time.perf_counter()
        exact_batch = index.search_vectors(queries[:batch], k=10)
        ours_batch_qps = batch / (time.perf_counter() - started)
        first_pass = {}
        for candidates in (100, 1000):
            started = time.perf_counter()
            index.search_vectors(queries[:1], k=10, candidates=candidates)  # builds the sign codes once
            build_s = time.perf_counter() - started
            started = time.perf_counter()
            approx = index.search_vectors(queries[:batch], k=10, candidates=candidates)
            qps = batch / (time.perf_counter() - started)
            recall = np.mean([len({(h.path, h.page) for h in a} & {(h.path, h.page) for h in b}) / 10
                              for a, b in zip(exact_batch, approx)])
            first_pass[candidates] = (qps, recall, build_s)

        segment = next(iter(index.manifest.segments.values()))
        vectors, offsets = index.store.segment_arrays(segment)
        page_tensors = [torch.from_numpy(np.array(vectors[offsets[p] : offsets[p + 1]], dtype=np.float32)) for p in range(pages)]
        started = time.perf_counter()
        theirs = [
            BaseVisualRetrieverProcessor.score_multi_vector([torch.from_numpy(q)], page_tensors, device="cpu")[0].numpy()
            for q in queries[:baseline_queries]
        ]
        their_qps = baseline_queries / (time.perf_counter() - started)
        del page_tensors

    agree = True
    for hits, scores in zip(single, theirs):
        ours_top = [int(h.path[-10:-4]) * PAGES_PER_DOC + h.page - 1 for h in hits]
        their_top = list(np.argsort(-scores, kind="stable")[:10])
        agree &= ours_top == their_top
    print(f"N = {pages:,} pages x {TOKENS} x {DIM}, {tokens}-token queries")
    print(f"  colpali-engine processor.score, 1 query per call: {their_qps:8.2f} queries/s")
    print(f"  lgpt-index, 1 query per call:                     {ours_single_qps:8.2f} queries/s  ({ours_single_qps / their_qps:.1f}x)")
    print(f"  lgpt-index, {batch} queries per call:                   {ours_batch_qps:8.2f} queries/s  ({ours_batch_qps / their_qps:.1f}x)")
    print(f"  top-10 identical on {baseline_queries} queries: {'yes' if agree else 'NO'}")
    for candidates, (qps, recall, build_s) in first_pass.items():
        print(f"  lossy first pass (--first-pass {candidates}), {batch} queries: {qps:8.2f} queries/s "
              f"({qps / ours_batch_qps:.2f}x exact batched), recall@10 {recall:.0%}; first call {build_s:.1f} s")
    print(f"  fresh process: imports {timing['imports_s']:.2f} s, open (checksums included) {timing['open_s']:.2f} s, "
          f"first query {timing['score_s']:.2f} s; time to first result after imports {timing['open_s'] + timing['score_s']:.2f} s")
    return agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--batch", type=int, default=16, help="queries per call in the batched run")
    parser.add_argument("--baseline-queries", type=int, default=3)
    parser.add_argument("--query-tokens", type=int, default=20)
    args = parser.parse_args()
    ok = all([bench(n, args.batch, args.baseline_queries, args.query_tokens) for n in args.pages])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
