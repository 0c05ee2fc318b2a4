"""Exact MaxSim (late interaction) over float16 page vectors, accumulated in float32."""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

# Rows of page vectors scored at once, at most. The float16 rows are widened into
# one reused float32 buffer (no allocation per chunk), and the similarity block
# (query tokens x rows) is kept near SIM_ELEMENTS so that both stay in cache;
# this also bounds memory whatever the index size.
CHUNK_ROWS = 32768
SIM_ELEMENTS = 4 << 20


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
    import torch

    if pages is None:
        pages = np.arange(len(offsets) - 1)
    pages = np.asarray(pages, dtype=np.int64)
    q_lengths = [len(q) for q in queries]
    q_all = torch.from_numpy(np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])).to(device)
    q_owner = torch.repeat_interleave(torch.arange(len(queries), device=device), torch.tensor(q_lengths, device=device))
    scores = torch.zeros((len(queries), len(pages)), dtype=torch.float32, device=device)
    with warnings.catch_warnings():
        # the memory map is read-only and torch says so; nothing here writes to it
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        source = torch.from_numpy(vectors) if isinstance(vectors, np.ndarray) else vectors
    chunk_rows = min(CHUNK_ROWS, max(4096, SIM_ELEMENTS // max(1, len(q_all))))
    buffer = torch.empty((min(chunk_rows, max(len(vectors), 1)), vectors.shape[1]), dtype=torch.float32, device=device)

    for lo, hi in _chunks(pages, offsets, chunk_rows):
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
        sim = q_all @ block.T  # (query tokens, rows) in float32
        if np.all(lengths == lengths[0]):
            per_page = sim.view(sim.shape[0], len(chunk_pages), int(lengths[0])).amax(dim=2)
        else:
            per_page = torch.segment_reduce(sim.T, "max", lengths=torch.from_numpy(lengths).to(device), axis=0).T
        scores[:, lo:hi].index_add_(0, q_owner, per_page)
    return scores.cpu().numpy()


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
