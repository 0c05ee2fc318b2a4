#!/usr/bin/env python3
"""The full-text engine, chosen by measurement: SQLite FTS5 against tantivy on the same pages.

N synthetic pages (default 10,000) of Zipf-distributed words plus invoice-like codes, tokenized
by the one tokenizer (index/text/tokenize.py) and given to each engine as space-joined tokens (so
both index exactly the same terms). For each engine: build time, index size on disk, the median
latency of 2- to 4-token queries (top 100), and whether deleting 10 % of the pages leaves the
statistics a query sees (document frequency, page count) as a fresh index of the live pages would.

    python scripts/bench_lexical.py                 # 10,000 pages
    python scripts/bench_lexical.py --pages 2000 --queries 50

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

from localgpt_index.index.text.engine import LexicalIndex, PageText  # noqa: E402
from localgpt_index.index.text.tokenize import tokenize  # noqa: E402


def corpus(pages: int, seed: int = 0) -> list[PageText]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(30_000)]
    ranks = np.arange(1, len(vocabulary) + 1)
    p = 1.0 / ranks**1.07
    p /= p.sum()
    rows = []
    for number in range(pages):
        words = list(np.array(vocabulary)[rng.choice(len(vocabulary), size=int(rng.integers(200, 600)), p=p)])
        words.insert(int(rng.integers(0, len(words))), f"INV-2024-{number:05d}")
        rows.append(PageText(f"docs/doc{number // 10:05d}.pdf", number % 10 + 1, " ".join(words)))
    return rows


def queries(rows: list[PageText], count: int, seed: int = 1) -> list[str]:
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
    truth = [sum(token in set(tokenize(row.text)) for row in live) for token in probe]
    return {"build_s": built, "bytes": size_of(path), "query_ms": 1000 * statistics.median(latencies),
            "exact_after_delete": seen == truth, "num_docs_after_delete": searcher.num_docs,
            "doc_freq_excess": int(sum(seen) - sum(truth))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
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
