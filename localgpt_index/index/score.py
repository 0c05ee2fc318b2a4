"""Exact MaxSim (late interaction) over float16 page vectors, accumulated in float32.

torch does the work wherever it is installed (always, for a real model). Where it cannot be
imported the same chunks go through NumPy: the fast test tier runs without torch, with a fake
model, and its queries take that path (equal to torch's within float32 rounding; tested)."""

from __future__ import annotations

import functools
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..core.cpus import available_cpus

if TYPE_CHECKING:
    pass

# Rows of page vectors scored at once, at most. The float16 rows are widened into
# one reused float32 buffer (no allocation per chunk), and the similarity block
# (query tokens x rows) is kept near SIM_ELEMENTS so that both stay in a core's L2
# cache: measured on this project's 2-core EPYC, 4,096-row chunks score one query 2.4x
# faster than 32,768-row ones, and 8 stacked queries 1.5x faster with 2,048 rows.
# It also bounds memory whatever the index size.
CHUNK_ROWS = 4096
MIN_CHUNK_ROWS = 1024
SIM_ELEMENTS = 512 << 10


def maxsim(
    queries: Sequence[np.ndarray],
    vectors: np.ndarray,
    offsets: np.ndarray,
    pages: np.ndarray | None = None,
    device: str = "cpu",
) -> np.ndarray:
    """Scores (n_queries, n_pages) for every page of one segment, or the `pages` listed.

    score(q, p) = sum over query tokens of the max over page tokens of <q_i, p_j>.
    All queries are stacked into one matrix so each page block is read once.
    """
    if pages is None:
        pages = np.arange(len(offsets) - 1)
    pages = np.asarray(pages, dtype=np.int64)
    if device == "cpu" and not torch_available():
        return _maxsim_numpy(queries, vectors, offsets, pages)
    import torch

    q_lengths = [len(q) for q in queries]
    q_all = torch.from_numpy(np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])).to(device)
    q_owner = torch.repeat_interleave(torch.arange(len(queries), device=device), torch.tensor(q_lengths, device=device))
    scores = torch.zeros((len(queries), len(pages)), dtype=torch.float32, device=device)
    with warnings.catch_warnings():
        # the memory map is read-only and torch says so; nothing here writes to it
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        source = torch.from_numpy(vectors) if isinstance(vectors, np.ndarray) else vectors
    chunk_rows = min(CHUNK_ROWS, max(MIN_CHUNK_ROWS, SIM_ELEMENTS // max(1, len(q_all))))
    chunks = list(_chunks(pages, offsets, chunk_rows))

    def score_chunks(part: list[tuple[int, int]]) -> None:
        buffer = torch.empty((min(chunk_rows, max(len(vectors), 1)), vectors.shape[1]), dtype=torch.float32, device=device)
        for lo, hi in part:
            chunk_pages = pages[lo:hi]
            starts, ends = offsets[chunk_pages], offsets[chunk_pages + 1]
            lengths = ends - starts
            n_rows = int(lengths.sum())
            block = buffer[:n_rows] if n_rows <= len(buffer) else torch.empty((n_rows, buffer.shape[1]), device=device)
            if np.all(starts[1:] == ends[:-1]):  # contiguous pages: one copy
                block.copy_(source[int(starts[0]) : int(ends[-1])])
            else:
                at = 0
                for s, e in zip(starts, ends):
                    block[at : at + e - s].copy_(source[int(s) : int(e)])
                    at += int(e - s)
            scores[:, lo:hi].index_add_(0, q_owner, _best_per_page(q_all, block[:n_rows], lengths))

    workers = min(SCORE_WORKERS, len(chunks)) if device == "cpu" else 1
    if workers <= 1:
        score_chunks(chunks)
    else:
        # Chunks side by side on the scorer's threads, one torch thread each: widening float16 and
        # the skinny matrix product keep one core busy each far better than one op on all cores.
        list(scoring_pool().map(score_chunks, [chunks[i::workers] for i in range(workers)]))
    return scores.cpu().numpy()


SCORE_WORKERS = min(available_cpus(), 8)
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def scoring_pool() -> ThreadPoolExecutor:
    """The scorer's threads, started once per process, each with one torch thread of its own.

    torch's thread count is per thread once a thread has used torch, and new threads start with
    the count last set anywhere: each worker sets its own to 1, then the count the process had is
    set back once, here. No call of maxsim touches a process-wide setting (overlapping calls used to
    leave the whole process at one thread)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _start_pool(SCORE_WORKERS)
        return _pool


def _start_pool(workers: int) -> ThreadPoolExecutor:
    import torch

    threads = torch.get_num_threads()
    started = threading.Barrier(workers + 1)

    def one_torch_thread() -> None:
        torch.set_num_threads(1)
        started.wait()

    pool = ThreadPoolExecutor(workers, thread_name_prefix="lgpt-score", initializer=one_torch_thread)
    for _ in range(workers):  # every worker starts now (each is busy in its initializer, so the next submit makes another)
        pool.submit(lambda: None)
    started.wait()
    torch.set_num_threads(threads)  # the default for threads started from now on, as before the pool
    # and once more on every worker: the count its initializer set did not hold after the line above
    # (each worker ran with the process's count: teams of torch threads oversubscribed the scorer's
    # cores); set from now on, after its first op, it is the worker's own
    again = threading.Barrier(workers)
    for done in [pool.submit(_one_torch_thread, again) for _ in range(workers)]:  # one each: they wait for each other
        done.result()
    torch.set_num_threads(threads)  # again: a thread started later begins with the count last set
    return pool


def _one_torch_thread(together: threading.Barrier) -> None:
    import torch

    torch.set_num_threads(1)
    torch.ones(256, 256) @ torch.ones(256, 256)  # a first op on this thread's own count
    together.wait()


@functools.cache
def torch_available() -> bool:
    """Whether torch can be imported here (not in the fast test tier)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _maxsim_numpy(queries: Sequence[np.ndarray], vectors: np.ndarray, offsets: np.ndarray, pages: np.ndarray) -> np.ndarray:
    """maxsim without torch: the same chunks, widened to float32, one product per query (BLAS
    rounds a product of stacked queries differently, and a query's scores must not depend on
    which queries it was asked with)."""
    queries = [np.asarray(q, dtype=np.float32) for q in queries]
    chunk_rows = min(CHUNK_ROWS, max(MIN_CHUNK_ROWS, SIM_ELEMENTS // max(1, max(len(q) for q in queries))))
    scores = np.zeros((len(queries), len(pages)), dtype=np.float32)
    for lo, hi in _chunks(pages, offsets, chunk_rows):
        starts, ends = offsets[pages[lo:hi]], offsets[pages[lo:hi] + 1]
        block = np.concatenate([vectors[s:e] for s, e in zip(starts, ends)]).astype(np.float32)
        for i, query in enumerate(queries):
            scores[i, lo:hi] = _page_sums(query @ block.T, ends - starts, [0])[0]
    return scores


def _page_sums(sim: np.ndarray, lengths: np.ndarray, q_starts) -> np.ndarray:
    """(query tokens, rows) similarities -> (queries, pages): each token's best row in each page,
    summed over each query's tokens."""
    best = np.maximum.reduceat(sim, np.cumsum(lengths) - lengths, axis=1)
    return np.add.reduceat(best, q_starts, axis=0)


ROWS_FIRST_FROM = 64  # query tokens from which (rows x tokens) products run faster (measured on a 2-core x86 CPU)


def _best_per_page(q_all, block, lengths: np.ndarray):
    """Each query token's best similarity in each page of `block`: (query tokens, pages), in float32.

    Few query tokens: one (tokens x rows) product. Many (several queries stacked): the product
    is taken rows-first, which keeps the big dimension outermost (about 30 % faster there)."""
    if len(q_all) < ROWS_FIRST_FROM:
        return _max_per_page(q_all @ block.T, lengths)
    return _max_per_page_rows_first(block @ q_all.T, lengths)


def _max_per_page(sim, lengths: np.ndarray):
    """(query tokens, rows) similarities -> (query tokens, pages): each token's best match per page."""
    import torch

    if np.all(lengths == lengths[0]):
        return sim.view(sim.shape[0], len(lengths), int(lengths[0])).amax(dim=2)
    return torch.segment_reduce(sim.T, "max", lengths=torch.from_numpy(lengths).to(sim.device), axis=0).T


def _max_per_page_rows_first(sim, lengths: np.ndarray):
    """(rows, query tokens) similarities -> (query tokens, pages)."""
    import torch

    if np.all(lengths == lengths[0]):
        return sim.view(len(lengths), int(lengths[0]), sim.shape[1]).amax(dim=1).T
    return torch.segment_reduce(sim, "max", lengths=torch.from_numpy(lengths).to(sim.device), axis=0).T


def _chunks(pages: np.ndarray, offsets: np.ndarray, chunk_rows: int):
    """Split the page list into runs of at most `chunk_rows` rows (at least one page each)."""
    lengths = offsets[pages + 1] - offsets[pages]
    lo, acc = 0, 0
    for i, n in enumerate(lengths):
        if acc and acc + n > chunk_rows:
            yield lo, i
            lo, acc = i, 0
        acc += int(n)
    if len(pages):
        yield lo, len(pages)


def sign_codes(vectors: np.ndarray) -> np.ndarray:
    """int8 signs (+1/-1) of every float16 vector component: half the bytes, read by int8 matrix products."""
    codes = np.empty(vectors.shape, dtype=np.int8)
    for start in range(0, len(vectors), CHUNK_ROWS):
        codes[start : start + CHUNK_ROWS] = np.where(vectors[start : start + CHUNK_ROWS] >= 0, 1, -1)
    return codes


def approximate_maxsim(queries: Sequence[np.ndarray], codes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A cheap MaxSim for a first pass: queries quantised to int8, pages reduced to signs,
    one int8 matrix product per chunk (VNNI/AMX on recent CPUs). Scores rank roughly like
    the exact ones; they are not comparable to them."""
    q_all = np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])
    scale = np.abs(q_all).max(axis=1, keepdims=True) + 1e-12
    q8 = np.rint(q_all / scale * 127).astype(np.int8)
    if not torch_available():
        return _approximate_maxsim_numpy(queries, q8, scale, codes, offsets)
    import torch

    rows = max(32, -(-len(q8) // 8) * 8)  # torch._int_mm wants more than 16 rows, a multiple of 8
    padded = np.zeros((rows, q8.shape[1]), dtype=np.int8)
    padded[: len(q8)] = q8
    q_tensor = torch.from_numpy(padded)
    owner = torch.repeat_interleave(torch.arange(len(queries)), torch.tensor([len(q) for q in queries]))
    weights = torch.from_numpy(scale[:, 0])
    source = torch.from_numpy(codes)
    pages = np.arange(len(offsets) - 1)
    scores = torch.zeros((len(queries), len(pages)), dtype=torch.float32)
    for lo, hi in _chunks(pages, offsets, CHUNK_ROWS):
        start, end = int(offsets[lo]), int(offsets[hi])
        width = -(-(end - start) // 8) * 8
        block = source[start:end]
        if width != end - start:
            block = torch.cat([block, torch.zeros((width - (end - start), block.shape[1]), dtype=torch.int8)])
        sim = torch._int_mm(q_tensor, block.T.contiguous())[: len(q8), : end - start].float() * weights[:, None]
        lengths = offsets[lo + 1 : hi + 1] - offsets[lo:hi]
        scores[:, lo:hi].index_add_(0, owner, _max_per_page(sim, lengths))
    return scores.numpy()


def _approximate_maxsim_numpy(queries, q8: np.ndarray, scale: np.ndarray, codes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """approximate_maxsim without torch: NumPy's int32 product per chunk."""
    q_starts = np.cumsum([0] + [len(q) for q in queries[:-1]])
    pages = np.arange(len(offsets) - 1)
    scores = np.zeros((len(queries), len(pages)), dtype=np.float32)
    for lo, hi in _chunks(pages, offsets, CHUNK_ROWS):
        block = codes[int(offsets[lo]) : int(offsets[hi])]
        sim = (q8.astype(np.int32) @ block.T.astype(np.int32)).astype(np.float32) * scale
        scores[:, lo:hi] = _page_sums(sim, offsets[lo + 1 : hi + 1] - offsets[lo:hi], q_starts)
    return scores
