#!/usr/bin/env python3
"""The local store against Qdrant on the same pages: build and query times side by side, and
the recall of Qdrant's lossy prefetch (a pooled vector per page) against exact MaxSim.

Real-shaped vectors: the fake model with ColPali's geometry (1,030 unit vectors of 128
dimensions per page, random), so the model costs nothing and the stores are what is timed.
Pages are frames of multi-page TIFF files (200 files x 10 frames = 2,000 pages by default).
Qdrant runs in its client's in-process mode (`qdrant+path://`), the only one available here:
brute-force MaxSim in NumPy, vectors held in memory and pickled to SQLite. A Qdrant server or
cluster has the same API and a different cost profile; this measures the mode tests use.

    python scripts/bench_store.py                   # 2,000 pages
    python scripts/bench_store.py --pages 500

Prints build seconds, open seconds, median query milliseconds, whether both stores return the
same top-10, and prefetch recall@10 at several candidate counts. Exits 1 if the top-10s differ.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_tiffs(folder: Path, files: int, frames: int) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    for number in range(files):
        pages = [Image.new("RGB", (64, 64), ((number * 7 + f) % 256, (number * 13) % 256, f * 20 % 256)) for f in range(frames)]
        pages[0].save(folder / f"scan-{number:04d}.tiff", save_all=True, append_images=pages[1:])


def unit(rng, rows: int) -> np.ndarray:
    vectors = rng.standard_normal((rows, 128), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def timed_build(docs: Path, store, model: Path) -> float:
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec

    started = time.perf_counter()
    report = build_index(docs, store, BuildOptions(model=ModelSpec(str(model)), batch_size=16))
    assert report.failed == 0, report.failures[:2]
    return time.perf_counter() - started


def query_times(index, queries: list[np.ndarray], candidates: int | None = None) -> tuple[float, list]:
    seconds, results = [], []
    for query in queries:
        started = time.perf_counter()
        results.append(index.search_vectors([query], 10, "cpu", None, candidates)[0])  # positional: older trees name it candidates
        seconds.append(time.perf_counter() - started)
    return 1000 * statistics.median(seconds), results


def pages_of(hits) -> list[tuple[str, int]]:
    return [(h.path, h.page) for h in hits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000, help="a multiple of 10")
    parser.add_argument("--queries", type=int, default=10)
    args = parser.parse_args()
    from localgpt_index.testing.fake import write_fake_checkpoint
    from localgpt_index.query.search import open_index
    from localgpt_index.index.open import open_store

    rng = np.random.default_rng(0)
    queries = [unit(rng, 20) for _ in range(args.queries)]
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-store-") as tmp:
        tmp = Path(tmp)
        model = write_fake_checkpoint(tmp / "fake", page_tokens=1030, render_size=(64, 64))
        make_tiffs(tmp / "docs", args.pages // 10, 10)
        rows = {}
        for name, url in (("local", None), ("qdrant+path", f"qdrant+path://{tmp / 'qd'}/bench")):
            store = open_store(url, index_dir=tmp / "idx")
            build_s = timed_build(tmp / "docs", store, model)
            if hasattr(store, "close"):
                store.close()
            store = open_store(url, index_dir=tmp / "idx")
            started = time.perf_counter()
            index = open_index(store=store)
            open_s = time.perf_counter() - started
            query_ms, results = query_times(index, queries)
            rows[name] = {"build": build_s, "open": open_s, "query": query_ms, "results": results, "index": index, "store": store}
            print(f"{name:>12}: build {build_s:7.1f} s, open {open_s:6.1f} s, query {query_ms:8.1f} ms (median of {len(queries)})",
                  flush=True)
        same = all(pages_of(a) == pages_of(b) for a, b in zip(rows["local"]["results"], rows["qdrant+path"]["results"]))
        worst = max(abs(x.score - y.score) for a, b in zip(rows["local"]["results"], rows["qdrant+path"]["results"]) for x, y in zip(a, b))
        print(f"{args.pages:,} pages of 1,030 x 128: same top-10 in both stores for all {len(queries)} queries: {same} "
              f"(largest score difference {worst:.2e})")
        exact = rows["qdrant+path"]["results"]
        for candidates in (100, 400, 1000):
            ms, approx = query_times(rows["qdrant+path"]["index"], queries, candidates)
            recall = np.mean([len(set(pages_of(a)) & set(pages_of(b))) / 10 for a, b in zip(exact, approx)])
            print(f"  qdrant prefetch of {candidates:>5} by the pooled vector: recall@10 {recall:.0%}, query {ms:.1f} ms")
        rows["qdrant+path"]["store"].close()
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
