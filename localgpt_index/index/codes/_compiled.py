"""The numba kernel of kernel.py, in a module of its own: imported only where numba is (kernel.py falls
back to NumPy without it), and defined at module level so that numba's on-disk cache can keep it."""

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


def _nearest(x: np.ndarray, centroids_t: np.ndarray, half_norms: np.ndarray, out: np.ndarray) -> None:
    """out[i] = argmax_k x[i].centroids[k] - half_norms[k] (the nearest centroid), in the calling thread:
    a BLAS product here would start the BLAS library's own threads beside the build's. centroids_t is
    (dim, k): the inner loop runs over centroids (contiguous: vectorised)."""
    dim, k = centroids_t.shape
    acc = np.empty(k, dtype=np.float32)
    for i in range(x.shape[0]):
        acc[:] = -half_norms
        for d in range(dim):
            value = x[i, d]
            for c in range(k):
                acc[c] += value * centroids_t[d, c]
        out[i] = np.argmax(acc)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        nearest_kernel = numba.njit(nogil=True, cache=True, fastmath=True)(_nearest)
    except RuntimeError:
        nearest_kernel = numba.njit(nogil=True, fastmath=True)(_nearest)
