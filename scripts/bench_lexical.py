#!/usr/bin/env python3
"""The full-text engine, chosen by measurement: SQLite FTS5 against tantivy on the same pages.

N synthetic pages (default 10,000) of Zipf-distributed words plus invoice-like codes, tokenized
by the one tokenizer (index/text/tokenize.py) and given to each engine as space-joined tokens (so
both index exactly the same terms). For each engine: build time, index size on disk, the median
latency of 2- to 4-token queries (top 100), and whether deleting 10 % of the pages leaves the
statistics a query sees (document frequency, page count) as a fresh index of the live pages would.

    python scripts/bench_lexical.py                 # 10,000 pages
    python scripts/bench_lexical.py --pages 2000 --queries 50
    python scripts/bench_lexical.py --hybrid        # a hybrid query against a visual one, same index

With --hybrid: an index of N pages x 1030 vectors x 128 (bench_query's, the bench checkpoint's
geometry) and the FTS5 index of N pages of text over the same documents; one query at a time,
visual and hybrid alternating in rounds, the median time of each and the ratio per round. The
text index's size is printed beside the vectors'.

Rounds are interleaved (fts5, tantivy, fts5, ...) and the spread (min-max) printed; the
machine's speed drifts, so compare within a run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localgpt_index.index.text.engine import LexicalIndex, LexicalPage  # noqa: E402
from localgpt_index.index.text.tokenize import tokenize  # noqa: E402


def corpus(pages: int, seed: int = 0) -> list[LexicalPage]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = np.array(["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(30_000)])
    ranks = np.arange(1, len(vocabulary) + 1)
    p = 1.0 / ranks**1.07
    p /= p.sum()
    rows = []
    for number in range(pages):
        words = list(vocabulary[rng.choice(len(vocabulary), size=int(rng.integers(200, 600)), p=p)])
        words.insert(int(rng.integers(0, len(words))), f"INV-2024-{number:05d}")
        rows.append(LexicalPage(f"docs/doc{number // 10:05d}.pdf", number % 10 + 1, " ".join(words)))
    return rows


def queries(rows: list[LexicalPage], count: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    chosen = []
    for _ in range(count):
        words = rows[int(rng.integers(0, len(rows)))].text.split()
        chosen.append(" ".join(words[int(i)] for i in rng.choice(len(words), size=int(rng.integers(2, 5)))))
    return chosen


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def fts5_round(rows, asked, folder: Path) -> dict:
    target = folder / "fts5.sqlite"
    t0 = time.perf_counter()
    index = LexicalIndex.create(target)
    index.update(removed=[], added=rows)
    index.close()
    built = time.perf_counter() - t0
    index = LexicalIndex.open(target)
    latencies = []
    for query in asked:
        t = time.perf_counter()
        index.search(query, 100)
        latencies.append(time.perf_counter() - t)
    index.close()
    # deletion: remove 10 % of the documents; the statistics must equal a fresh index's
    gone = sorted({row.path for row in rows})[::10]
    live = [row for row in rows if row.path not in set(gone)]
    index = LexicalIndex.open(target, writable=True)
    index.update(removed=gone, added=[])
    fresh = LexicalIndex.create(folder / "fresh.sqlite")
    fresh.update(removed=[], added=live)
    probe = tokenize(live[0].text)[:20]
    exact = index.statistics(probe) == fresh.statistics(probe)
    index.close(), fresh.close()
    return {"build_s": built, "bytes": size_of(target), "query_ms": 1000 * statistics.median(latencies), "exact_after_delete": exact}


def tantivy_round(rows, asked, folder: Path) -> dict:
    import tantivy

    path = folder / "tantivy"
    path.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("path", stored=True, tokenizer_name="raw")
    builder.add_integer_field("page", stored=True)
    builder.add_text_field("tokens", stored=False, tokenizer_name="whitespace")
    schema = builder.build()
    t0 = time.perf_counter()
    index = tantivy.Index(schema, path=str(path))
    index.register_tokenizer("whitespace", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    for row in rows:
        writer.add_document(tantivy.Document(path=row.path, page=row.page, tokens=" ".join(tokenize(row.text))))
    writer.commit()
    writer.wait_merging_threads()
    built = time.perf_counter() - t0
    index.reload()
    searcher = index.searcher()
    latencies = []
    for query in asked:
        t = time.perf_counter()
        terms = [tantivy.Query.term_query(schema, "tokens", token) for token in dict.fromkeys(tokenize(query))]
        searcher.search(tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in terms]), 100)
        latencies.append(time.perf_counter() - t)
    gone = sorted({row.path for row in rows})[::10]
    probe = tokenize([row for row in rows if row.path not in set(gone)][0].text)[:20]
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    for doc in gone:
        writer.delete_documents_by_term("path", doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    seen = [searcher.doc_freq("tokens", token) for token in probe]
    live = [row for row in rows if row.path not in set(gone)]
    live_tokens = [set(tokenize(row.text)) for row in live]
    truth = [sum(token in tokens for tokens in live_tokens) for token in probe]
    return {"build_s": built, "bytes": size_of(path), "query_ms": 1000 * statistics.median(latencies),
            "exact_after_delete": seen == truth, "num_docs_after_delete": searcher.num_docs,
            "doc_freq_excess": int(sum(seen) - sum(truth))}


def hybrid_rounds(pages: int, rounds: int, count: int) -> dict:
    """Visual against hybrid queries on one index of `pages` pages (the vectors of bench_query)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_query import DIM, PAGES_PER_DOC, make_index, unit

    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.query.request import QueryRequest
    from localgpt_index.query.search import Searcher

    with tempfile.TemporaryDirectory() as folder:
        make_index(Path(folder), pages)
        rows = corpus(pages)
        lexical = LexicalIndex.create()
        lexical.update(removed=[], added=[LexicalPage(f"/bench/doc-{n // PAGES_PER_DOC:06d}.pdf", n % PAGES_PER_DOC + 1, row.text)
                                          for n, row in enumerate(rows)])
        text_bytes = len(lexical.to_bytes())
        store = LocalStore(Path(folder) / "default")
        view = store.open_view()
        index = Searcher(view, lexical=lexical)
        vector_bytes = store.size_bytes(view.manifest)
        rng = np.random.default_rng(3)
        texts = queries(rows, count)
        vectors = [unit(rng, 20) for _ in texts]
        index.search_encoded(QueryRequest(queries=texts[:1], k=10, mode="visual"), vectors[:1])  # first touch of the pages
        ratios, times = [], {"visual": [], "hybrid": []}
        for number in range(rounds):
            spent = {}
            for mode in (("visual", "hybrid") if number % 2 == 0 else ("hybrid", "visual")):
                started = time.perf_counter()
                for text, query in zip(texts, vectors):
                    index.search_encoded(QueryRequest(queries=[text], k=10, mode=mode), [query])
                spent[mode] = (time.perf_counter() - started) / len(texts)
                times[mode].append(spent[mode])
            ratios.append(spent["hybrid"] / spent["visual"])
    return {"pages": pages, "dim": DIM, "visual_ms": 1000 * statistics.median(times["visual"]),
            "hybrid_ms": 1000 * statistics.median(times["hybrid"]), "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "text_index_bytes": text_bytes, "vector_bytes": vector_bytes,
            "text_to_vectors": text_bytes / vector_bytes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hybrid", action="store_true", help="time hybrid queries against visual ones instead")
    args = parser.parse_args()
    if args.hybrid:
        print(json.dumps(hybrid_rounds(args.pages, max(args.rounds, 3), min(args.queries, 10)), indent=2))
        return 0
    rows = corpus(args.pages)
    asked = queries(rows, args.queries)
    text_bytes = sum(len(row.text.encode()) for row in rows)
    results: dict[str, list[dict]] = {"fts5": [], "tantivy": []}
    for number in range(args.rounds):
        order = ["fts5", "tantivy"] if number % 2 == 0 else ["tantivy", "fts5"]
        for engine in order:
            with tempfile.TemporaryDirectory() as folder:
                run = fts5_round if engine == "fts5" else tantivy_round
                results[engine].append(run(rows, asked, Path(folder)))
                shutil.rmtree(folder, ignore_errors=True)
    summary = {"pages": args.pages, "text_bytes": text_bytes, "engines": {}}
    for engine, runs in results.items():
        line = {}
        for key in ("build_s", "query_ms", "bytes"):
            values = [run[key] for run in runs]
            line[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        line["exact_after_delete"] = all(run["exact_after_delete"] for run in runs)
        line.update({key: runs[-1][key] for key in runs[-1] if key not in line and key not in ("build_s", "query_ms", "bytes")})
        summary["engines"][engine] = line
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
