"""Exact MaxSim (late interaction) over float16 page vectors, accumulated in float32."""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Rows of page vectors scored at once: bounds the float32 similarity block
# (query tokens x rows) and the float32 copy of the page vectors.
CHUNK_ROWS = 65536


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
    scores = np.zeros((len(queries), len(pages)), dtype=np.float32)

    for lo, hi in _chunks(pages, offsets):
        chunk_pages = pages[lo:hi]
        starts, ends = offsets[chunk_pages], offsets[chunk_pages + 1]
        contiguous = np.all(starts[1:] == ends[:-1])
        rows = slice(int(starts[0]), int(ends[-1])) if contiguous else np.concatenate(
            [np.arange(s, e) for s, e in zip(starts, ends)]
        )
        block = torch.from_numpy(np.array(vectors[rows], dtype=np.float32)).to(device)
        sim = q_all @ block.T  # (query tokens, rows) in float32
        lengths = ends - starts
        if np.all(lengths == lengths[0]):
            per_page = sim.view(sim.shape[0], len(chunk_pages), int(lengths[0])).amax(dim=2)
        else:
            per_page = torch.segment_reduce(sim.T, "max", lengths=torch.from_numpy(lengths).to(device), axis=0).T
        summed = torch.zeros(len(queries), len(chunk_pages), dtype=torch.float32, device=device)
        summed.index_add_(0, q_owner, per_page)
        scores[:, lo:hi] = summed.cpu().numpy()
    return scores


def _chunks(pages: np.ndarray, offsets: np.ndarray):
    """Split the page list into runs of at most CHUNK_ROWS rows (at least one page each)."""
    lengths = offsets[pages + 1] - offsets[pages]
    lo, acc = 0, 0
    for i, n in enumerate(lengths):
        if acc and acc + n > CHUNK_ROWS:
            yield lo, i
            lo, acc = i, 0
        acc += int(n)
    if len(pages):
        yield lo, len(pages)
