#!/usr/bin/env python3
"""The CPU scorer's inner loop, stage by stage, on one thread, in CPU time per page row (ns a row):
torch's path (widen float16 -> float32, the product tokens-first and rows-first, the max per page
per token, the whole loop a chunk) and the compiled kernel (index/scoring/kernel.py: all of it fused),
against the float32 peak of one core (a large product on one torch thread, in CPU time too).

CPU time (time.thread_time) rather than wall: it holds where other work shares the cores.

    python scripts/bench_score_stages.py                 # 300 pages of 1,030 x 128, 20-token queries
    python scripts/bench_score_stages.py --pages 600 --tokens 20 160
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROWS, DIM = 1030, 128


def per_row(work, rows: int, times: int = 3) -> float:
    """The best of `times` runs of work(), in ns of this thread's CPU time per row."""
    spent = []
    for _ in range(times):
        started = time.thread_time()
        work()
        spent.append(time.thread_time() - started)
    return min(spent) * 1e9 / rows


def main() -> None:
    import torch

    from localgpt_index.index.scoring.kernel import query_columns, score_pages

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300, help="pages of 1,030 rows (300: 79 MB, beyond the caches)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[20], help="query tokens (160: 8 stacked queries)")
    parser.add_argument("--per-chunk", type=int, default=4, help="pages a chunk on torch's path (the scorer's: 4)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.pages * ROWS, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    half = vectors.astype(np.float16)
    del vectors
    rows, source, per = len(half), torch.from_numpy(half), args.per_chunk
    side = 2048
    a, b = torch.randn(side, side), torch.randn(side, side)
    peak_s_per_flop = per_row(lambda: a @ b, 1) * 1e-9 / (2 * side**3)
    starts = np.arange(args.pages, dtype=np.int64) * ROWS
    print(f"{args.pages} pages x {ROWS} x {DIM}, torch {torch.__version__} "
          f"({'MKL' if torch.backends.mkl.is_available() else 'another BLAS'}), "
          f"1 thread; float32 peak of one core {1e-9 / peak_s_per_flop:.0f} GFLOP/s (CPU time)")
    for tokens in args.tokens:
        q = torch.from_numpy(rng.standard_normal((tokens, DIM), dtype=np.float32))
        chunk = per * ROWS
        block, sims, out = torch.empty((chunk, DIM)), torch.empty(tokens * chunk), torch.empty((args.pages, tokens))
        spans = [(lo, min(lo + per, args.pages)) for lo in range(0, args.pages, per)]

        def widen():
            for lo, hi in spans:
                block[: (hi - lo) * ROWS].copy_(source[lo * ROWS : hi * ROWS])

        def tokens_first():
            for lo, hi in spans:
                torch.mm(q, block[: (hi - lo) * ROWS].T, out=sims[: tokens * (hi - lo) * ROWS].view(tokens, -1))

        def rows_first():
            for lo, hi in spans:
                torch.mm(block[: (hi - lo) * ROWS], q.T, out=sims[: tokens * (hi - lo) * ROWS].view(-1, tokens))

        def page_max():
            for lo, hi in spans:
                torch.amax(sims[: tokens * (hi - lo) * ROWS].view(tokens, hi - lo, ROWS), dim=2, out=out[lo:hi].T)

        def whole():
            widen_one = block[:chunk]
            for lo, hi in spans:
                n = (hi - lo) * ROWS
                widen_one[:n].copy_(source[lo * ROWS : hi * ROWS])
                torch.mm(q, block[:n].T, out=sims[: tokens * n].view(tokens, n))
                torch.amax(sims[: tokens * n].view(tokens, hi - lo, ROWS), dim=2, out=out[lo:hi].T)

        qt, best = query_columns(q.numpy()), np.empty((args.pages, tokens), dtype=np.float32)
        score_pages(half.view(np.uint16), starts[:1], starts[:1] + ROWS, qt, best[:1])  # compiled (or loaded) here

        def compiled():
            score_pages(half.view(np.uint16), starts, starts + ROWS, qt, best)

        at_peak = 2 * tokens * DIM * peak_s_per_flop * 1e9
        stages = {"widen": widen, "product tokens-first": tokens_first, "product rows-first": rows_first, "max per page": page_max,
                  "torch's loop (widen, tokens-first, max)": whole, "compiled kernel (all fused)": compiled}
        print(f"{tokens} query tokens: at the peak {at_peak:.1f} ns a row")
        for name, work in stages.items():
            ns = per_row(work, rows)
            share = f"  ({100 * at_peak / ns:4.0f} % of the peak)" if name not in ("widen", "max per page") else ""
            print(f"  {name:42s} {ns:7.1f} ns a row{share}")


if __name__ == "__main__":
    main()
