"""The numba kernel of kernel.py, in a module of its own: imported only where numba is.

kernel.py falls back to NumPy without it; it is defined at module level so that numba's on-disk
cache can keep it."""

from __future__ import annotations

import warnings
from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic


def _ctpop(typingctx: Any, x: Any) -> tuple[Any, Any]:
    """LLVM's ctpop: one instruction where the CPU has it, vectorised with the loop (AVX-512 VPOPCNTQ)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


_popcount: Any = intrinsic(_ctpop)  # called as _popcount(x) in compiled code


def _kernel(words: np.ndarray, ids: np.ndarray, table: np.ndarray, weight: np.ndarray, offsets: np.ndarray,
            pages: np.ndarray, q_words: np.ndarray, owner: np.ndarray, lo: int, hi: int, out: np.ndarray) -> None:
    """Pages pages[lo:hi]: out[query, i] += each of its tokens' largest estimate over the page's rows,
    table[ids[row], token] - weight[token] * hamming(token, row) (pack.query_tables).

    The inner loop runs over query tokens (contiguous: vectorised) and keeps each token's best in
    float32 lanes; 128 dimensions (two words) have a fused loop of their own (measured 3.5x faster on a
    Zen 4 core than accumulating word by word)."""
    n_words, n_tokens = q_words.shape
    best = np.empty(n_tokens, dtype=np.float32)
    dist = np.empty(n_tokens, dtype=np.float32)
    q0 = q_words[0].copy()
    q1 = q_words[min(1, n_words - 1)].copy()
    floor = np.float32(-3.0e38)
    for i in range(lo, hi):
        page = pages[i]
        start, end = offsets[page], offsets[page + 1]
        if end == start:
            continue
        best[:] = floor
        if n_words == 2:
            for row in range(start, end):
                c0 = words[row, 0]
                c1 = words[row, 1]
                near = table[ids[row]]
                for t in range(n_tokens):
                    h = np.float32(_popcount(q0[t] ^ c0) + _popcount(q1[t] ^ c1))
                    best[t] = max(best[t], near[t] - weight[t] * h)
        else:
            for row in range(start, end):
                dist[:] = 0
                for w in range(n_words):
                    code = words[row, w]
                    for t in range(n_tokens):
                        dist[t] += np.float32(_popcount(q_words[w, t] ^ code))
                near = table[ids[row]]
                for t in range(n_tokens):
                    best[t] = max(best[t], near[t] - weight[t] * dist[t])
        for t in range(n_tokens):
            out[owner[t], i] += best[t]


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # NumbaWarning where no cache directory is writable
    try:
        estimate_kernel = numba.njit(nogil=True, cache=True)(_kernel)
    except RuntimeError:  # "cannot cache function": a read-only install and no writable user cache: compiled per process
        estimate_kernel = numba.njit(nogil=True)(_kernel)


def _nearest(x: np.ndarray, centroids: np.ndarray, half_norms: np.ndarray, out: np.ndarray) -> None:
    """out[i] = argmax_k x[i].centroids[k] - half_norms[k] (the nearest centroid; the first of equals),
    in the calling thread: a BLAS product here would start the BLAS library's own threads beside the
    build's. Four rows at a time share each centroid's load, their dot products kept in registers
    (1.6x the one-row loop that kept (k,) sums in memory)."""
    rows, dim = x.shape
    k = centroids.shape[0]
    whole = rows - rows % 4
    for i in range(0, whole, 4):
        b0 = b1 = b2 = b3 = -np.inf
        a0 = a1 = a2 = a3 = 0
        for c in range(k):
            s0 = s1 = s2 = s3 = np.float32(0.0)
            for d in range(dim):
                w = centroids[c, d]
                s0 += x[i, d] * w
                s1 += x[i + 1, d] * w
                s2 += x[i + 2, d] * w
                s3 += x[i + 3, d] * w
            h = half_norms[c]
            if s0 - h > b0:
                b0, a0 = s0 - h, c
            if s1 - h > b1:
                b1, a1 = s1 - h, c
            if s2 - h > b2:
                b2, a2 = s2 - h, c
            if s3 - h > b3:
                b3, a3 = s3 - h, c
        out[i], out[i + 1], out[i + 2], out[i + 3] = a0, a1, a2, a3
    for i in range(whole, rows):
        best, arg = -np.inf, 0
        for c in range(k):
            s = np.float32(0.0)
            for d in range(dim):
                s += x[i, d] * centroids[c, d]
            if s - half_norms[c] > best:
                best, arg = s - half_norms[c], c
        out[i] = arg


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        nearest_kernel = numba.njit(nogil=True, cache=True, fastmath=True)(_nearest)
    except RuntimeError:
        nearest_kernel = numba.njit(nogil=True, fastmath=True)(_nearest)
