"""Estimated MaxSim over residual binary codes (pack.py).

For each page, each query token's largest
estimate of q.v over the page's rows, table[centroid id] - weight * hamming(sign(q), code), summed
over the query's tokens (higher is better). With one zero centroid and unit weights it is plain
hamming MaxSim over the signs (hamming_maxsim: codes version 1).

Compiled by numba where it imports (`@njit(nogil=True)`: the scorer's own threads run it side by
side, without numba's threading layer, which is not safe for concurrent callers), else NumPy's
bitwise_count on chunks (measured in scripts/bench_first_pass.py; much slower). Nothing here sets
any process-wide state per call: the thread pool is started once per process."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from ....core.cpus import SharedPool, available_cpus

PAGES_PER_TASK = 2048  # pages per unit of work on the pool: enough to amortise a task, small enough to balance
NUMPY_ROWS = 8192  # rows per NumPy chunk: (tokens x rows x words) bytes stay in tens of MiB
WORKERS = min(available_cpus(), 8)


def estimate_maxsim(q_words: np.ndarray, owner: np.ndarray, n_queries: int, words: np.ndarray, ids: np.ndarray,
                    table: np.ndarray, weight: np.ndarray, offsets: np.ndarray, pages: np.ndarray | None = None,
                    kernel: str | None = None, check: Callable[[int, int], None] | None = None) -> np.ndarray:
    """(n_queries, len(pages)) float32, higher is better: per query, the sum over its tokens of the largest
    estimate table[ids[row], token] - weight[token] * hamming(token, row) over the page's rows.
    q_words: (words, tokens) uint64 (pack.query_words); words: (rows, words) uint64; ids: (rows,) uint8;
    table: (centroids, tokens) float32; weight: (tokens,) float32 (pack.query_tables). `check(lo, hi)` is
    called before the rows lo..hi-1 of each task's pages are read (lazily checked codes: artifact.PartCodes)."""
    if pages is None:
        pages = np.arange(len(offsets) - 1, dtype=np.int64)
    pages = np.ascontiguousarray(pages, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    table = np.ascontiguousarray(table, dtype=np.float32)
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    out = np.zeros((n_queries, len(pages)), dtype=np.float32)
    if not len(pages) or not q_words.shape[1]:
        return out
    run = _numba_kernel() if kernel in (None, "numba") else None
    if run is None and kernel == "numba":
        raise RuntimeError("numba is not available here")
    if run is None:
        run = _numpy_kernel
    spans = [(lo, min(lo + PAGES_PER_TASK, len(pages))) for lo in range(0, len(pages), PAGES_PER_TASK)]
    args = (words, ids, table, weight, offsets, pages, q_words, owner)

    def task(lo: int, hi: int) -> None:
        if check is not None:  # pages ascend: their rows lie within these
            check(int(offsets[pages[lo]]), int(offsets[pages[hi - 1] + 1]))
        run(*args, lo, hi, out)

    if len(spans) == 1 or WORKERS == 1:
        for lo, hi in spans:
            task(lo, hi)
    else:
        list(_thread_pool().map(lambda span: task(*span), spans))
    return out


def hamming_maxsim(q_words: np.ndarray, owner: np.ndarray, n_queries: int, words: np.ndarray, offsets: np.ndarray,
                   pages: np.ndarray | None = None, kernel: str | None = None) -> np.ndarray:
    """(n_queries, len(pages)) int32: per query, the sum over its tokens of the smallest hamming distance
    to any row of the page (estimate_maxsim with one zero centroid and unit weights, negated)."""
    n_tokens = q_words.shape[1]
    scores = estimate_maxsim(q_words, owner, n_queries, words, np.zeros(len(words), dtype=np.uint8),
                             np.zeros((1, n_tokens), dtype=np.float32), np.ones(n_tokens, dtype=np.float32), offsets, pages, kernel)
    return (-scores).astype(np.int32)


def kernel_name() -> str:
    """Which kernel hamming_maxsim runs here: "numba" or "numpy"."""
    return "numba" if _numba_kernel() is not None else "numpy"


_thread_pool = SharedPool(lambda: ThreadPoolExecutor(WORKERS, thread_name_prefix="lgpt-codes"))


def _numpy_kernel(words, ids, table, weight, offsets, pages, q_words, owner, lo: int, hi: int, out: np.ndarray) -> None:
    """The same sums with NumPy: (tokens, rows) estimates per chunk of pages, the maximum per page."""
    n_queries = out.shape[0]
    start = lo
    while start < hi:
        end, rows = start, 0
        while end < hi and (end == start or rows + offsets[pages[end] + 1] - offsets[pages[end]] <= NUMPY_ROWS):
            rows += int(offsets[pages[end] + 1] - offsets[pages[end]])
            end += 1
        chunk = pages[start:end]
        lengths = offsets[chunk + 1] - offsets[chunk]
        taken = np.concatenate([np.arange(offsets[p], offsets[p + 1]) for p in chunk])
        block = words[taken]
        dist = np.zeros((q_words.shape[1], len(block)), dtype=np.float32)
        for w in range(q_words.shape[0]):
            dist += np.bitwise_count(q_words[w][:, None] ^ block[:, w][None, :])
        estimate = table[ids[taken]].T - weight[:, None] * dist
        best = np.maximum.reduceat(estimate, np.cumsum(lengths) - lengths, axis=1)
        best[:, lengths == 0] = 0  # a page without rows adds nothing
        for query in range(n_queries):
            out[query, start:end] = best[owner == query].sum(axis=0)
        start = end


@functools.cache
def _numba_kernel() -> Callable[..., Any] | None:
    """The compiled kernel, or None where numba does not import (compiled on first use, a few seconds;
    cached on disk where numba finds a writable cache directory, so once per machine)."""
    try:
        from ._compiled import estimate_kernel
    except ImportError:
        return None
    return estimate_kernel
