"""One scoring call's pieces (maxsim.py): its queries, which may be given late, and its pages in chunks.

The scorer's threads take the chunks one at a time."""

from __future__ import annotations

import functools
import threading
import warnings
from typing import Callable, NamedTuple, Sequence, Union

import numpy as np

# The queries a call scores: their arrays, or a function that gives them when the call's scoring begins
# (serve's sweep: the queries on a part are those there when a scorer thread takes its first chunk,
# not when it was queued behind the part before). Called once, on whichever thread begins.
Queries = Union[Sequence[np.ndarray], Callable[[], Sequence[np.ndarray]]]


class QueryStack:
    """The queries of one compiled call, stacked when its first chunk is taken (`take`), and each page's
    best similarity for each of their tokens (`best`, filled by the kernel)."""

    def __init__(self, queries: Queries, pages: int) -> None:
        self._queries, self._pages = queries, pages
        self.bounds: np.ndarray | None = None

    def take(self) -> bool:
        """The queries stacked (once); False when there are none (nothing to score)."""
        from .kernel import query_columns

        queries = self._queries() if callable(self._queries) else self._queries
        self.bounds = np.cumsum([0] + [len(q) for q in queries])
        if not len(queries):
            return False
        q_all = np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])
        self.columns = query_columns(q_all)
        self.best = np.empty((self._pages, len(q_all)), dtype=np.float32)
        return True

    def sums(self) -> np.ndarray:
        """(queries, pages): each query's sum of its tokens' best similarities (after `take`: the caller's,
        or the chunk queue's first ask, which even a call without pages makes)."""
        assert self.bounds is not None
        if len(self.bounds) == 1:
            return np.zeros((0, self._pages), dtype=np.float32)
        return np.stack([self.best[:, a:b].sum(axis=1) for a, b in zip(self.bounds[:-1], self.bounds[1:])])


class Chunk(NamedTuple):
    lo: int  # the chunk's first and last page (positions in the page list)
    hi: int
    rows: np.ndarray | tuple[int, int]  # the rows to read: a (start, end) run, or each row's index
    lengths: np.ndarray  # rows of each page
    same_length: int  # every page's row count when they are all equal, else 0


def plan_chunks(pages: np.ndarray, offsets: np.ndarray, chunk_rows: int) -> list[Chunk]:
    """The chunks of `pages`, each at most `chunk_rows` rows (at least one page), and the rows each reads."""
    starts, ends = offsets[pages], offsets[pages + 1]
    plan = []
    for lo, hi in page_runs(pages, offsets, chunk_rows):
        lengths = ends[lo:hi] - starts[lo:hi]
        plan.append(Chunk(lo, hi, rows_of(starts[lo:hi], ends[lo:hi]), lengths, int(lengths[0]) if np.all(lengths == lengths[0]) else 0))
    return plan


def rows_of(starts: np.ndarray, ends: np.ndarray) -> np.ndarray | tuple[int, int]:
    """The rows of pages starts[i]..ends[i]: one (start, end) run when they are contiguous (one copy),
    else each row's index."""
    if np.all(starts[1:] == ends[:-1]):
        return int(starts[0]), int(ends[-1])
    lengths = ends - starts
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))


class ChunkQueue:
    """The chunks of one call, handed out one at a time to whichever scorer thread asks; `first`, when
    given, is called by the thread that asks first, before it gets a chunk (none are handed out when it
    returns False or raises)."""

    def __init__(self, chunks: list, first: Callable[[], bool] | None = None) -> None:
        self._count = len(chunks)
        self._chunks = iter(chunks)
        self._first = first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            if self._first is not None:
                first, self._first = self._first, None
                try:
                    if not first():
                        self._chunks = iter(())
                except BaseException:
                    self._chunks = iter(())
                    raise
            return next(self._chunks)


def page_runs(pages: np.ndarray, offsets: np.ndarray, chunk_rows: int):
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


def tensor_of(array: np.ndarray):
    """`array` as a torch tensor, no copy. A read-only one (a memory-mapped index's vectors, only ever read) makes
    torch warn, once a process: that once is taken at the first call, silenced, so that no call after it swaps the
    process's warning filters (warnings.catch_warnings is not thread-safe, and the scorer's threads all come here)."""
    import torch

    _read_only_warned()
    return torch.from_numpy(array)


@functools.cache
def _read_only_warned() -> None:
    import torch

    array = np.zeros(1, dtype=np.float16)
    array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        torch.from_numpy(array)
