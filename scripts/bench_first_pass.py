#!/usr/bin/env python3
"""The binary first pass (issue 28): what it keeps of the exact ranking and what it saves.

1-bit codes (the sign of each dimension, 16 bytes a 128-dim vector) are scored with popcount hamming
MaxSim over every page (index/scoring/codes), the best C pages per query rescored exactly (index/scoring/maxsim.py).
Measured here, in one run:
- recall@10 against exact MaxSim for several C: on random unit vectors (N pages x 1,030 tokens) and,
  with --real INDEX, on the vectors an index holds (one built with the tiny checkpoint from rendered
  pages: the structure real vectors have), its queries encoded by the index's own model;
- one query's time, exact vs first pass + rescoring, interleaved over --rounds (the machine is shared:
  the median, the spread min-max and the median ratio); the hamming kernel's pages/s, wall and per
  CPU-second (a fairer figure on a loaded machine);
- at --big pages (100,000 by default; random codes in memory, rescoring measured on the N-page set):
  the first pass's time, plus rescoring C pages, against the budget of one query under 1.5 s.

    python scripts/bench_first_pass.py                        # N = 10,000, big = 100,000
    python scripts/bench_first_pass.py --real /path/to/index --json
    python scripts/bench_first_pass.py --quick --json         # a smoke run (the tests run it)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DIM = 128
K = 10
QUERY_WORDS = "revenue profit risk plan quarter audit budget forecast market growth cost sales margin debt cash tax".split()


def unit_pages(pages: int, tokens: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = np.empty((pages * tokens, DIM), dtype=np.float16)
    step = 1 << 18
    for start in range(0, len(vectors), step):
        part = rng.standard_normal((min(step, len(vectors) - start), DIM), dtype=np.float32)
        vectors[start : start + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return vectors, np.arange(pages + 1, dtype=np.int64) * tokens


def unit_queries(count: int, tokens: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    queries = [rng.standard_normal((tokens, DIM), dtype=np.float32) for _ in range(count)]
    return [q / np.linalg.norm(q, axis=1, keepdims=True) for q in queries]


def top(scores: np.ndarray, pages: np.ndarray, k: int = K) -> list[int]:
    order = np.lexsort((pages, -scores))[:k]
    return [int(p) for p in pages[order]]


def exact_top(query, vectors, offsets) -> list[int]:
    from localgpt_index.index.scoring.maxsim import maxsim

    return top(maxsim([query], vectors, offsets)[0], np.arange(len(offsets) - 1))


def coded(vectors, offsets, plain: bool = False, splits: list[int] | None = None) -> list:
    """The codes a build writes for these vectors, a segment per span of pages between `splits` (default:
    one segment); plain: version 1's sign codes."""
    from localgpt_index.index.scoring.codes import SegmentCodes, pack_codes
    from localgpt_index.index.scoring.codes.pack import as_words, code_segment

    splits = splits or [0, len(offsets) - 1]
    segments = []
    for number, (first, end) in enumerate(zip(splits, splits[1:])):
        rows = vectors[offsets[first] : offsets[end]]
        local = offsets[first : end + 1] - offsets[first]
        pages = np.arange(end - first, dtype=np.int64)
        if plain:
            segments.append(SegmentCodes(f"s{number}", as_words(pack_codes(rows)), local, pages))
        else:
            words, ids, book = code_segment(rows)
            segments.append(SegmentCodes(f"s{number}", words, local, pages, ids, book))
    return segments


def two_pass_top(query, vectors, offsets, segments, candidates: int) -> list[int]:
    from localgpt_index.index.scoring.codes import first_pass
    from localgpt_index.index.scoring.maxsim import maxsim

    picks = first_pass([query], segments, candidates)[0]
    starts = np.cumsum([0] + [len(s.pages) for s in segments])
    chosen = np.concatenate([starts[i] + picks[s.segment] for i, s in enumerate(segments) if s.segment in picks] or [np.zeros(0, np.int64)])
    return top(maxsim([query], vectors, offsets, chosen)[0], chosen)


def recalls(queries, vectors, offsets, cs: list[int], splits: list[int] | None = None) -> dict[str, dict[int, float]]:
    """recall@10 against exact of the codes builds write, and of version 1's plain sign codes."""
    exact = [set(exact_top(q, vectors, offsets)) for q in queries]
    report = {}
    for name, plain in (("recall_at_10", False), ("recall_at_10_plain_signs", True)):
        segment = coded(vectors, offsets, plain, splits)
        report[name] = {c: float(np.mean([len(e & set(two_pass_top(q, vectors, offsets, segment, c))) / len(e)
                                          for q, e in zip(queries, exact)])) for c in cs}
    return report


def planted(queries, vectors, offsets, cosine: float, seed: int) -> list[int]:
    """Per query, one page whose first tokens are the query's own, each moved to `cosine` of it (a page
    that answers it, as retrieval has them, among random ones): the pages planted, in query order."""
    rng = np.random.default_rng(seed)
    pages = [int(p) for p in rng.choice(len(offsets) - 1, size=len(queries), replace=False)]
    noise = np.sqrt(1 / cosine**2 - 1)
    for q, page in zip(queries, pages):
        g = rng.standard_normal(q.shape, dtype=np.float32)
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        moved = q + noise * g
        rows = min(len(q), int(offsets[page + 1] - offsets[page]))
        vectors[offsets[page] : offsets[page] + rows] = (moved / np.linalg.norm(moved, axis=1, keepdims=True))[:rows]
    return pages


def needle_hits(queries, pages, vectors, offsets, cs: list[int]) -> dict:
    """Hit@10 of each query's planted page: exact, and first pass + rescoring at each C."""
    hits = {"exact": float(np.mean([p in exact_top(q, vectors, offsets) for q, p in zip(queries, pages)]))}
    segment = coded(vectors, offsets)
    for c in cs:
        hits[str(c)] = float(np.mean([p in two_pass_top(q, vectors, offsets, segment, c) for q, p in zip(queries, pages)]))
    return hits


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def timings(queries, vectors, offsets, candidates: int, rounds: int) -> dict:
    """Exact vs first pass + rescoring, one query per call, the order alternating round by round."""
    from localgpt_index.index.scoring.codes import query_words

    exact_s, two_s, ratios, kernel_wall, kernel_cpu = [], [], [], [], []
    segment = coded(vectors, offsets)
    runs = {"exact": lambda q: exact_top(q, vectors, offsets), "two": lambda q: two_pass_top(q, vectors, offsets, segment, candidates)}
    two_pass_top(queries[0], vectors, offsets, segment, candidates)  # compile / load the kernel once
    for r in range(rounds):
        for q in queries:
            took = {}
            for name in (("exact", "two") if r % 2 == 0 else ("two", "exact")):
                started = time.perf_counter()
                runs[name](q)
                took[name] = time.perf_counter() - started
            exact_s.append(took["exact"])
            two_s.append(took["two"])
            ratios.append(took["exact"] / took["two"])
            q_words, owner = query_words([q])
            wall, cpu = time.perf_counter(), time.process_time()
            segment[0].estimates(q_words, owner, q, 1)
            kernel_wall.append(time.perf_counter() - wall)
            kernel_cpu.append(time.process_time() - cpu)
    pages = len(offsets) - 1
    return {"exact_s": spread(exact_s), "first_pass_s": spread(two_s), "speedup": spread(ratios),
            "kernel_pages_per_s": pages / statistics.median(kernel_wall),
            "kernel_pages_per_cpu_s": pages / statistics.median(kernel_cpu)}


def big(pages: int, tokens: int, queries, vectors, offsets, candidates: int, rounds: int) -> dict:
    """The first pass over `pages` pages of random codes (in memory), plus rescoring `candidates` pages."""
    from localgpt_index.index.scoring.codes import SegmentCodes, query_words
    from localgpt_index.index.scoring.codes.pack import CENTROIDS, Codebook
    from localgpt_index.index.scoring.maxsim import maxsim

    rng = np.random.default_rng(7)
    words = rng.integers(0, np.iinfo(np.int64).max, size=(pages * tokens, 2), dtype=np.uint64)
    ids = rng.integers(0, CENTROIDS, size=pages * tokens, dtype=np.uint8)
    book = Codebook(rng.standard_normal((CENTROIDS, DIM), dtype=np.float32), np.full(DIM, 0.05, dtype=np.float32))
    big_offsets = np.arange(pages + 1, dtype=np.int64) * tokens
    segment = SegmentCodes("big", words, big_offsets, np.arange(pages, dtype=np.int64), ids, book)
    first, rescore, cpu, rescore_cpu = [], [], [], []
    for r in range(rounds):
        for q in queries:
            q_words, owner = query_words([q])
            started, cpu_started = time.perf_counter(), time.process_time()
            segment.estimates(q_words, owner, q, 1)
            first.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            chosen = rng.choice(len(offsets) - 1, size=min(candidates, len(offsets) - 1), replace=False)
            started, cpu_started = time.perf_counter(), time.process_time()
            maxsim([q], vectors, offsets, np.sort(chosen))
            rescore.append(time.perf_counter() - started)
            rescore_cpu.append(time.process_time() - cpu_started)
    total = [a + b for a, b in zip(first, rescore)]
    return {"pages": pages, "codes_bytes": int(words.nbytes + ids.nbytes), "first_pass_s": spread(first), "first_pass_cpu_s": spread(cpu),
            "rescore_s": spread(rescore), "rescore_cpu_s": spread(rescore_cpu),
            "total_s": spread(total), "kernel_pages_per_s": pages / statistics.median(first),
            "within_1_5_s": statistics.median(total) <= 1.5}


def real(index_dir: Path, cs: list[int], count: int) -> dict:
    """Recall on an index's own vectors (codes packed from its memory-mapped segments: the bytes build stores)."""
    from localgpt_index.query.search import open_index

    index = open_index(index_dir)
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(QUERY_WORDS, 2)) + f" {i}" for i in range(count)]
    queries = index.load_encoder().encode_queries(texts)
    segments = list(index.manifest.segments.values())
    arrays = [index.store.segment_arrays(s) for s in segments]  # coded per segment, as the build writes them
    vectors = np.concatenate([np.asarray(v) for v, _ in arrays])
    lengths = np.concatenate([np.diff(o) for _, o in arrays])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    splits = [int(n) for n in np.cumsum([0] + [len(o) - 1 for _, o in arrays])]
    return {"index": str(index_dir), "pages": len(offsets) - 1, "tokens_per_page": float(np.mean(np.diff(offsets))),
            "segments": len(segments), "queries": count, **recalls(queries, vectors, offsets, cs, splits)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=1030)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--candidates", type=int, nargs="+", default=[100, 300, 1000, 3000])
    parser.add_argument("--chosen", type=int, default=None, help="C timed (default: the plan's DEFAULT_CANDIDATES)")
    parser.add_argument("--real", type=Path, default=None, help="an index (folder of its default/) to measure recall on")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from localgpt_index.core.cpus import available_cpus
    from localgpt_index.index.scoring.codes import kernel_name
    from localgpt_index.index.scoring.codes.plan import DEFAULT_CANDIDATES

    if args.quick:
        args.pages, args.tokens, args.big, args.queries, args.rounds, args.candidates = 400, 64, 2000, 3, 1, [10, 50, 400]
    chosen = args.chosen or min(DEFAULT_CANDIDATES, args.pages)
    vectors, offsets = unit_pages(args.pages, args.tokens, seed=1)
    queries = unit_queries(args.queries, 20, seed=2)
    report = {"kernel": kernel_name(), "cpus": available_cpus(), "load_average_before": os.getloadavg()[0],
              "pages": args.pages, "tokens_per_page": args.tokens, "query_tokens": 20,
              "chosen_candidates": chosen, "random": recalls(queries, vectors, offsets, args.candidates)}
    needles = unit_queries(args.queries, 20, seed=5)
    needle_cs = [c for c in (10, 30, 100, 300) if c < args.pages] or [1]
    for cosine in (0.6, 0.45, 0.35):
        pages = planted(needles, vectors, offsets, cosine, seed=int(cosine * 100))
        report["random"][f"needle_hit_at_10_cos_{cosine}"] = needle_hits(needles, pages, vectors, offsets, needle_cs)
    report["timing"] = timings(queries[:3], vectors, offsets, chosen, args.rounds)
    report["big"] = big(args.big, args.tokens, queries[:2], vectors, offsets, chosen, args.rounds)
    if args.real:
        report["real"] = real(args.real, args.candidates, 30 if not args.quick else 3)
    report["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1) if args.json else _text(report))
    return report


def _text(r: dict) -> str:
    t, b = r["timing"], r["big"]
    lines = [f"kernel {r['kernel']}; {r['pages']} pages x {r['tokens_per_page']} tokens, 20-token queries",
             "recall@10 (random unit vectors): " + ", ".join(f"C={c}: {v:.2f}" for c, v in r["random"]["recall_at_10"].items())]
    lines += [f"planted page found in the top-10 (token cosine {key.rsplit('_', 1)[1]}): "
              + ", ".join(f"{c}: {v:.2f}" for c, v in hits.items())
              for key, hits in r["random"].items() if key.startswith("needle")]
    plain = r["random"]["recall_at_10_plain_signs"]
    lines.append("  version 1's plain sign codes: " + ", ".join(f"C={c}: {v:.2f}" for c, v in plain.items()))
    if "real" in r:
        lines.append(f"recall@10 ({r['real']['pages']} pages of {r['real']['index']}): "
                     + ", ".join(f"C={c}: {v:.2f}" for c, v in r["real"]["recall_at_10"].items()))
        plain = r["real"]["recall_at_10_plain_signs"]
        lines.append("  version 1's plain sign codes: " + ", ".join(f"C={c}: {v:.2f}" for c, v in plain.items()))
    lines += [f"one query: exact {t['exact_s']['median']:.3f} s, first pass + rescoring {r['chosen_candidates']} "
              f"{t['first_pass_s']['median']:.3f} s (speedup {t['speedup']['median']:.1f}x, "
              f"{t['speedup']['min']:.1f}-{t['speedup']['max']:.1f}); kernel {t['kernel_pages_per_s']:.0f} pages/s wall, "
              f"{t['kernel_pages_per_cpu_s']:.0f} a CPU-second",
              f"{b['pages']} pages: first pass {b['first_pass_s']['median']:.2f} s ({b['first_pass_s']['min']:.2f}-"
              f"{b['first_pass_s']['max']:.2f}), + rescoring {b['rescore_s']['median']:.2f} s = {b['total_s']['median']:.2f} s "
              f"({'within' if b['within_1_5_s'] else 'over'} 1.5 s); CPU time {b['first_pass_cpu_s']['median']:.2f} + "
              f"{b['rescore_cpu_s']['median']:.2f} s on {r['cpus']} cores; codes {b['codes_bytes'] >> 20} MiB; "
              f"load average {r['load_average_before']:.1f} -> {r['load_average_after']:.1f}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
