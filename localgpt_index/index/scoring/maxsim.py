"""Exact MaxSim (late interaction) over float16 page vectors, accumulated in float32.

On a CPU, in a process with torch (always, for a real model), a compiled kernel does the work once it
is loaded (kernel.py, numba: float16 widened in L1 and multiplied in registers, the max fused),
and torch's path until then: a process loads the kernel where that pays (kernel_policy.py: a
long-lived one at start, a one-shot one only for a large pass). torch scores on other devices, and
where the kernel cannot be had (no numba; checked once a process). Where torch cannot be imported the
same chunks go through NumPy: the fast test tier runs without torch, with a fake model, and its
queries take that path. All paths are equal within float32 rounding (tested)."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from ...core.cpus import SharedPool, available_cpus
from .chunks import ChunkQueue, Queries, QueryStack, page_runs, plan_chunks, tensor_of
from .kernel_policy import KernelPolicy

# Page rows scored at once, at most. A chunk's float16 rows are widened once into a float32 block
# that each scorer thread reuses, multiplied by the query tokens, and reduced to each page's best
# match while the block and the similarities are still in cache (four 1,030-row pages are 2 MiB in
# float32: the core's 1 MiB of L2 and the shared L3 of the EPYC this was tuned on). Fewer rows cost
# more in per-chunk overhead (each chunk is a few torch calls from Python: 2-page chunks scored one
# query at about 50 % of the float32 peak in CPU time, 4-page ones about 60 %, 8-page ones 45 %).
# A page longer than this is a chunk of its own. It also bounds memory whatever the index size.
CHUNK_ROWS = 4608
MIN_CHUNK_ROWS = 512
SIM_ELEMENTS = 512 << 10  # similarities (query tokens x rows) of one chunk, at most: many stacked tokens, fewer rows


def maxsim(
    queries: Queries,
    vectors: np.ndarray,
    offsets: np.ndarray,
    pages: np.ndarray | None = None,
    device: str = "cpu",
) -> np.ndarray:
    """Scores (n_queries, n_pages) for every page of one segment, or the `pages` listed.

    score(q, p) = sum over query tokens of the max over page tokens of <q_i, p_j>, in float32.
    All queries are stacked into one matrix so each page block is read once. `queries` given as a
    function are asked for when the compiled kernel's first chunk is taken (at once on other paths).
    """
    if pages is None:
        pages = np.arange(len(offsets) - 1)
    pages = np.asarray(pages, dtype=np.int64)
    compiled = device == "cpu" and isinstance(vectors, np.ndarray) and vectors.dtype == np.float16 and vectors.shape[1]
    if callable(queries):
        kernel = kernel_policy.loaded() if compiled and torch_available() else None
        if kernel is not None:
            return _maxsim_compiled(kernel, queries, vectors, offsets, pages)
        queries = queries()
    if not len(queries):
        return np.zeros((0, len(pages)), dtype=np.float32)
    if device == "cpu" and not torch_available():
        return _maxsim_numpy(queries, vectors, offsets, pages)
    if compiled:
        rows = int((offsets[pages + 1] - offsets[pages]).sum())
        kernel = kernel_policy.choose(rows, sum(len(q) for q in queries))
        if kernel is not None:
            return _maxsim_compiled(kernel, queries, vectors, offsets, pages)
    import torch

    q_all = torch.from_numpy(np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])).to(device)
    q_all = _padded(q_all)  # zero rows after the tokens: their maxima are in no query's sum
    source = tensor_of(vectors) if isinstance(vectors, np.ndarray) else vectors
    chunk_rows = min(CHUNK_ROWS, max(MIN_CHUNK_ROWS, SIM_ELEMENTS // max(1, len(q_all))))
    chunks = plan_chunks(pages, offsets, chunk_rows)
    # each page's best similarity for each query token, pages first: a chunk's result is one
    # contiguous run of rows; summed per query once at the end
    best = torch.empty((len(pages), len(q_all)), dtype=torch.float32, device=device)
    workers = max(1, min(SCORE_WORKERS, len(chunks)))
    queue = ChunkQueue(chunks)
    if device != "cpu" or SCORE_WORKERS <= 1:
        _score_chunks(queue, q_all, source, best, chunk_rows)
    else:
        # chunks side by side on the scorer's threads, one torch thread each (widening float16 and a
        # skinny matrix product keep one core busy each far better than one op on all cores), each
        # taking the next chunk when done with one: a thread slowed by anything else does fewer.
        # One chunk too (a few candidates of a segment): on the calling thread its ops would run on
        # torch's team of threads, 10-20x slower on a loaded machine (a 100-candidate rescoring, load 10)
        list(scoring_pool().map(lambda _: _score_chunks(queue, q_all, source, best, chunk_rows), range(workers)))
    bounds = np.cumsum([0] + [len(q) for q in queries])
    scores = torch.stack([best[:, a:b].sum(dim=1) for a, b in zip(bounds[:-1], bounds[1:])])
    return scores.cpu().numpy()


# Page rows a call of the compiled kernel scores (its block stays in L1 whatever the chunk): about 1 ms
# of one core's work for a 20-token query, long enough for the call's overhead not to count, short
# enough for the scorer's threads to share a few hundred pages evenly.
KERNEL_CHUNK_ROWS = 16 * 1030


def _maxsim_compiled(kernel, queries: Queries, vectors: np.ndarray, offsets: np.ndarray, pages: np.ndarray) -> np.ndarray:
    """maxsim by the compiled kernel: chunks of pages handed out to the scorer's threads, one kernel call a
    chunk (without the GIL), each writing its pages' rows of one (pages, query tokens) array."""
    bits = _read_only(np.ascontiguousarray(vectors).view(np.uint16))
    starts, ends = offsets[pages].astype(np.int64, copy=False), offsets[pages + 1].astype(np.int64, copy=False)
    stack = QueryStack(queries, len(pages))
    late = callable(queries)
    if not late:  # stacked here, not by a scorer thread (the other one, done with the part before, would wait on it)
        stack.take()
    chunks = ChunkQueue(list(page_runs(pages, offsets, KERNEL_CHUNK_ROWS)), first=stack.take if late else None)

    def score(_: object = None) -> None:
        for lo, hi in chunks:
            kernel(bits, starts[lo:hi], ends[lo:hi], stack.columns, stack.best[lo:hi])

    workers = max(1, min(SCORE_WORKERS, len(chunks)))
    if workers <= 1:
        score()
    else:
        list(scoring_pool().map(score, range(workers)))
    return stack.sums()


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view: numba compiles (and caches) one kernel per array type, and a memory-mapped
    index's vectors are read-only; in-memory ones take the same kernel this way."""
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


@functools.cache
def compiled_kernel():
    """The compiled kernel's entry point (kernel.score_pages), loaded from numba's cache (or compiled)
    and checked on a tiny page, once a process; None without numba, or where it cannot be built or gets
    that page wrong (a CPU without F16C, say): torch's path, exact too, scores then."""
    try:
        from .kernel import query_columns, score_pages

        # the types maxsim passes (numba loads one specialisation per type): read-only bits, int64 bounds
        ones, bounds = np.full((8, 8), 0x3C00, dtype=np.uint16), np.array([0, 8], dtype=np.int64)  # float16 1.0
        best = np.zeros((1, 25), dtype=np.float32)
        score_pages(_read_only(ones), bounds[:1], bounds[1:], query_columns(np.ones((25, 8), dtype=np.float32)), best)
    except Exception:  # noqa: BLE001 - whatever stops the kernel, torch's path answers the same
        return None
    return score_pages if np.all(best == 8) else None


# Where this process loads the kernel, and when it uses it (kernel_policy.py); compiled_kernel looked up
# when it loads (tests replace it, or the policy: KernelPolicy.fixed)
kernel_policy = KernelPolicy(lambda: compiled_kernel())


def warm_up() -> None:
    """A long-lived process (serve, mcp): have the compiled kernel loaded on a thread of its own (about
    a second on a loaded 2-core machine, most of it numba's own start), once, while the caller does
    something slower (a model's load); queries until then are scored by torch's path."""
    if torch_available():
        kernel_policy.warm_up()


def expect_pass(rows: int, tokens: int) -> None:
    """An exact pass of `rows` page rows for `tokens` query tokens is next (on the CPU): the kernel is
    loaded first where the pass pays for it (KernelPolicy.expect)."""
    if torch_available():
        kernel_policy.expect(rows, tokens)


def _score_chunks(chunks, q_all, source, best, chunk_rows: int) -> None:
    """Chunks (taken from `chunks` until none is left) into `best`, on one thread: float16 widened
    into one reused float32 block, the product (into one reused buffer) and each page's max taken
    while the block is in cache."""
    import torch

    width = source.shape[1]
    block = torch.empty((chunk_rows, width), dtype=torch.float32, device=q_all.device)
    sims = torch.empty(chunk_rows * len(q_all), dtype=torch.float32, device=q_all.device)
    staging = None  # float16 rows gathered from scattered pages
    for chunk in chunks:
        if isinstance(chunk.rows, tuple):
            n_rows = chunk.rows[1] - chunk.rows[0]
            rows = source[chunk.rows[0] : chunk.rows[1]]
        else:
            n_rows = len(chunk.rows)
            if staging is None or len(staging) < n_rows:
                staging = torch.empty((max(chunk_rows, n_rows), width), dtype=source.dtype, device=source.device)
            rows = torch.index_select(source, 0, torch.from_numpy(chunk.rows).to(source.device), out=staging[:n_rows])
        if n_rows > len(block):  # one page longer than a chunk
            block = torch.empty((n_rows, width), dtype=torch.float32, device=q_all.device)
            sims = torch.empty(n_rows * len(q_all), dtype=torch.float32, device=q_all.device)
        block[:n_rows].copy_(rows)
        _best_per_page(q_all, block[:n_rows], chunk.lengths, chunk.same_length, out=best[chunk.lo : chunk.hi],
                       sims=sims[: n_rows * len(q_all)])


SCORE_WORKERS = min(available_cpus(), 8)
# The scorer's threads, started once per process, each with one torch thread of its own: torch's
# thread count is per thread once a thread has used torch, and new threads start with the count last
# set anywhere, so each worker sets its own to 1, then the count the process had is set back once
# (_start_pool). No call of maxsim touches a process-wide setting (overlapping calls used to leave the
# whole process at one thread).
scoring_pool = SharedPool(lambda: _start_pool(SCORE_WORKERS))
# best_rows' thread (one torch thread), started on a process's first query with regions
rows_pool = SharedPool(lambda: _start_pool(1))
# Parts of one exact pass scored at once (LocalView.score_units, serve's sweep), each on a thread of this
# pool that waits for the scorer's threads: a part's chunks queue behind the one before, so a scorer
# thread with none left of a part goes on to the next instead of waiting for the other's last chunk.
PARTS_IN_FLIGHT = 2
part_pool = SharedPool(lambda: ThreadPoolExecutor(PARTS_IN_FLIGHT, thread_name_prefix="lgpt-part"))


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
    """maxsim without torch: the same chunks, widened to float32 once, one product per query (BLAS
    rounds a product of stacked queries differently, and a query's scores must not depend on
    which queries it was asked with). Rows first, (rows x tokens): OpenBLAS runs that shape far
    better than (tokens x rows), above all when its threads compete for the cores."""
    queries_t = [np.ascontiguousarray(np.asarray(q, dtype=np.float32).T) for q in queries]
    chunk_rows = min(CHUNK_ROWS, max(MIN_CHUNK_ROWS, SIM_ELEMENTS // max(1, max(q.shape[1] for q in queries_t))))
    scores = np.zeros((len(queries), len(pages)), dtype=np.float32)
    for chunk in plan_chunks(pages, offsets, chunk_rows):
        rows = slice(*chunk.rows) if isinstance(chunk.rows, tuple) else chunk.rows
        block = vectors[rows].astype(np.float32)
        for i, query_t in enumerate(queries_t):
            sim = block @ query_t
            if chunk.same_length:
                best = sim.reshape(len(chunk.lengths), chunk.same_length, -1).max(axis=1)
            else:
                best = np.maximum.reduceat(sim, np.cumsum(chunk.lengths) - chunk.lengths, axis=0)
            scores[i, chunk.lo : chunk.hi] = best.sum(axis=1)
    return scores


# Similarities (pages x rows x tokens) from which best_rows multiplies with torch: below it, torch's per-call
# cost and a scorer thread's hand-off are more than NumPy's whole product (a fake model's 16 patches a page).
TORCH_SIMILARITIES = 1 << 16
# Float16 values that torch widens on the caller's thread for NumPy's product: F16C, and one go below torch's
# parallel grain (32,768 elements: no thread team), where NumPy's own widening takes ten times as long
WIDEN_INLINE = 1 << 15


def best_rows(query: np.ndarray, pages: Sequence[np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where MaxSim's maxima are: for each page (float16 vectors, all of one length) and query token (`query`:
    (tokens, dim) float32), the one of the pages' `rows` it matches best, and that similarity: ((pages, tokens)
    positions in `rows`, (pages, tokens) float32). For a few pages at a time (a query's hits: query/patches): on a
    thread with torch where it can be imported (float16 widened by F16C: NumPy's widening alone costs
    more than torch's whole product; a thread of its own, not the scorer's: a server's next pass may be on those),
    by NumPy where the product is small (its vectors widened by torch, WIDEN_INLINE) or torch cannot be imported."""
    if not len(pages) or not len(rows) or not len(query):
        return np.zeros((len(pages), len(query)), dtype=np.int64), np.zeros((len(pages), len(query)), dtype=np.float32)
    runs = rows[-1] - rows[0] + 1 == len(rows) and bool(np.all(np.diff(rows) == 1))  # (an image's tokens: one run)
    parts = [page[rows[0]: rows[-1] + 1] for page in pages] if runs else [page[rows] for page in pages]
    with_torch = torch_available()
    if with_torch and (len(pages) * len(rows) * len(query) >= TORCH_SIMILARITIES or len(pages) * len(rows) * query.shape[1] > WIDEN_INLINE):
        return rows_pool().submit(_best_rows_torch, query, parts, len(rows)).result()
    block = np.concatenate(parts)
    sims = (_widened(block) if with_torch else block.astype(np.float32)) @ np.asarray(query, dtype=np.float32).T
    sims = sims.reshape(len(pages), len(rows), len(query))
    return sims.argmax(axis=1), sims.max(axis=1)


def _widened(block: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(block).float().numpy()


# best_rows' two buffers kept on its thread (the pages' vectors widened, and their similarities), up to this many
# bytes each: fresh ones of a few MB are memory the kernel maps page by page as it is first written, and stacking
# and widening a model-bound query's 10 hits (1,024 patches a page) so took 2.8-3.6 ms, against 2.1-2.4 in these
ROWS_BUFFER_BYTES = 32 << 20
_rows_buffers = threading.local()


def _best_rows_torch(query: np.ndarray, parts: Sequence[np.ndarray], rows: int) -> tuple[np.ndarray, np.ndarray]:
    import torch

    count, dim = len(parts) * rows, parts[0].shape[1]
    block, sims = _buffer("block", count * dim).view(count, dim), _buffer("sims", count * len(query)).view(len(query), count)
    for at, part in enumerate(parts):  # widened into the kept buffer, page by page: no stacked copy
        block[at * rows: (at + 1) * rows].copy_(tensor_of(part))  # (a page of other rows than `rows`: refused here)
    torch.mm(torch.from_numpy(np.asarray(query, dtype=np.float32)), block.T, out=sims)  # tokens first: the faster product here
    top, found = sims.view(len(query), len(parts), rows).max(dim=2)  # (the first of equal maxima, as NumPy's argmax)
    return found.T.numpy(), top.T.numpy()


def _buffer(name: str, size: int) -> Any:
    """A float32 tensor of `size` values: the start of one kept on this thread (grown to the next power of two,
    up to ROWS_BUFFER_BYTES), or a new one past that."""
    import torch

    if size * 4 > ROWS_BUFFER_BYTES:
        return torch.empty(size, dtype=torch.float32)
    kept = getattr(_rows_buffers, name, None)
    if kept is None or len(kept) < size:
        kept = torch.empty(min(1 << (size - 1).bit_length(), ROWS_BUFFER_BYTES // 4), dtype=torch.float32)
        setattr(_rows_buffers, name, kept)
    return kept[:size]


ROWS_FIRST_FROM = 64  # query tokens from which (rows x tokens) products run faster (measured on a 2-core x86 CPU)


def _best_per_page(q_all, block, lengths: np.ndarray, same_length: int = 0, out=None, sims=None):
    """Each query token's best similarity in each page of `block`: (pages, query tokens), in float32,
    written into `out` when given (a view of the caller's array: no copy); the similarities go
    into `sims` when given (a reused flat buffer of tokens x rows).

    Few query tokens: one (tokens x rows) product. Many (several queries stacked): the product
    is taken rows-first, which keeps the big dimension outermost (about 30 % faster there)."""
    import torch

    tokens_first = len(q_all) < ROWS_FIRST_FROM
    if sims is None:
        sim = q_all @ block.T if tokens_first else block @ q_all.T
    elif tokens_first:
        sim = torch.mm(q_all, block.T, out=sims.view(len(q_all), len(block)))
    else:
        sim = torch.mm(block, q_all.T, out=sims.view(len(block), len(q_all)))
    if not same_length:
        best = _page_max(sim.T if tokens_first else sim, lengths)
        return best if out is None else out.copy_(best)
    if out is None:
        out = torch.empty((len(lengths), len(q_all)), dtype=sim.dtype, device=sim.device)
    if tokens_first:
        torch.amax(sim.view(len(q_all), len(lengths), same_length), dim=2, out=out.T)
    else:
        torch.amax(sim.view(len(lengths), same_length, len(q_all)), dim=1, out=out)
    return out


# Many stacked query tokens (rows-first products) are padded with zero rows to a multiple of this:
# torch's CPU product (MKL) of (rows x tokens) took up to 1.5x longer for a count off a multiple of 16
# (135 tokens against 136, 157 against 160, on a Zen 4), and stacked queries have any count.
TOKEN_ALIGN = 16


def _padded(q_all):
    """`q_all` (tokens, dim) with zero rows up to a multiple of TOKEN_ALIGN tokens when it is multiplied
    rows-first (ROWS_FIRST_FROM tokens or more); as it is otherwise."""
    extra = -len(q_all) % TOKEN_ALIGN
    if len(q_all) < ROWS_FIRST_FROM or not extra:
        return q_all
    padded = q_all.new_zeros((len(q_all) + extra, q_all.shape[1]))
    padded[: len(q_all)] = q_all
    return padded


def _page_max(by_row, lengths: np.ndarray):
    """(rows, query tokens) similarities of pages of any lengths -> (pages, query tokens)."""
    import torch

    return torch.segment_reduce(by_row, "max", lengths=torch.from_numpy(lengths).to(by_row.device), axis=0)
