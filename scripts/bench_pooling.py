#!/usr/bin/env python3
"""What token pooling (build --pool-factor N) costs and saves, against the same build without it.

The bench corpus (scripts/bench_build.py's) is indexed twice with the "bench" checkpoint:
once plain, once pooled. Prints the index size, the build time, the query time and how
many of the plain top-10 pages the pooled index still returns.

    python scripts/bench_pooling.py --pool-factor 3

The checkpoint has random weights, so the top-10 overlap says how much the ranking moves,
not how much retrieval quality is kept; colpali-engine's authors report about 98 % of it
at factor 3 on real models.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

QUERIES = ["quarterly revenue", "report section 3", "risks and plan", "memo about revenue", "numbers for Q2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool-factor", type=int, default=3)
    parser.add_argument("--pdfs", type=int, default=40)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from bench_build import make_corpus

    from localgpt_index.indexing.options import BuildSettings
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.testing.checkpoints import make_checkpoint
    from localgpt_index.query.search import open_index
    from localgpt_index.index.local.store import LocalStore

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-pool-") as tmp:
        tmp = Path(tmp)
        model = str(make_checkpoint(tmp / "bench-colpali", "bench"))
        make_corpus(tmp / "corpus", args.pdfs, 5)
        results = {}
        for factor in (1, args.pool_factor):
            root = tmp / f"index-{factor}"
            started = time.perf_counter()
            options = BuildOptions(model=ModelSpec(model), settings=BuildSettings(pool_factor=factor))
            report = build_index(tmp / "corpus", LocalStore(root / "default"), options)
            build_s = time.perf_counter() - started - report.stage_seconds.get("load_model", 0)
            index = open_index(root)
            encoder = index.load_encoder()
            vectors = encoder.encode_queries(QUERIES)
            index.search_vectors(vectors, k=10)  # warm
            started = time.perf_counter()
            for _ in range(5):
                hits = index.search_vectors(vectors, k=10)
            query_s = (time.perf_counter() - started) / 5
            size = sum(p.stat().st_size for p in (root / "default" / "segments").iterdir())
            rows = sum(s.rows for s in index.manifest.segments.values())
            results[factor] = {"build_s": build_s, "query_s": query_s, "size": size, "rows": rows,
                               "top": [[(h.path, h.page) for h in q] for q in hits], "pool_s": report.stage_seconds.get("pool", 0)}
        plain, pooled = results[1], results[args.pool_factor]
        overlap = sum(len(set(a) & set(b)) for a, b in zip(plain["top"], pooled["top"])) / (10 * len(QUERIES))
        print(f"{report.pages_embedded} pages, bench checkpoint, CPU; pool factor {args.pool_factor} against none")
        print(f"  vectors:       {plain['rows']:,} -> {pooled['rows']:,} ({pooled['rows'] / plain['rows']:.2f})")
        ratio = pooled["size"] / plain["size"]
        print(f"  vector bytes:  {plain['size'] / 2**20:.1f} MiB -> {pooled['size'] / 2**20:.1f} MiB ({ratio:.2f})")
        print(f"  build:         {plain['build_s']:.1f} s -> {pooled['build_s']:.1f} s (pooling itself {pooled['pool_s']:.1f} s busy)")
        print(f"  query ({len(QUERIES)} at once): {plain['query_s'] * 1000:.0f} ms -> {pooled['query_s'] * 1000:.0f} ms")
        print(f"  top-10 overlap with the plain index: {overlap:.0%} (random weights: ranking movement, not quality)")


if __name__ == "__main__":
    main()
