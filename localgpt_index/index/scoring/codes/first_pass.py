"""The two passes: estimated MaxSim over every page's binary codes, then the candidates scored exactly.

Estimated MaxSim over every page's residual binary codes (kernel.estimate_maxsim) picks the best
`candidates` pages per query (over all segments together: each segment's estimates are of the same
q.v, whatever its codebook), then only those are scored exactly (index.scoring.maxsim over the
float16 vectors, `pages=` the candidates), so the scores returned are the exact ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..maxsim import maxsim
from .kernel import estimate_maxsim
from .pack import Codebook, query_tables, query_words


@dataclass(frozen=True)
class SegmentCodes:
    """One segment's codes as uint64 words (rows, words), its row offsets per page, the pages (indices
    in the segment) a query may return, and each row's centroid id in the segment's codebook (no
    codebook: one zero centroid and unit sigma, plain sign codes)."""

    segment: str
    words: np.ndarray
    offsets: np.ndarray
    pages: np.ndarray
    ids: np.ndarray | None = None
    codebook: Codebook | None = None
    check: Callable[[int, int], None] | None = None  # called before rows lo..hi-1 are scored (artifact.PartCodes.check_rows)

    def estimates(self, q_words: np.ndarray, owner: np.ndarray, stacked: np.ndarray, n_queries: int,
                  kernel: str | None = None) -> np.ndarray:
        """(n_queries, len(pages)) estimated MaxSim of this segment's pages (higher is better)."""
        dim = stacked.shape[1]
        book = self.codebook or Codebook(np.zeros((1, dim), np.float32), np.ones(dim, np.float32))
        ids = self.ids if self.ids is not None else np.zeros(len(self.words), dtype=np.uint8)
        table, weight = query_tables(stacked, book)
        return estimate_maxsim(q_words, owner, n_queries, self.words, ids, table, weight, self.offsets, self.pages, kernel=kernel,
                              check=self.check)


def first_pass(queries: Sequence[np.ndarray], segments: Sequence[SegmentCodes], candidates: int,
               kernel: str | None = None, scored: Callable[[SegmentCodes, np.ndarray], None] | None = None) -> list[dict[str, np.ndarray]]:
    """Per query, {segment: positions in that segment's `pages`, ascending} of the `candidates` pages with
    the largest estimated MaxSim over all segments (ties: the earlier segment, then the earlier page).
    `scored(segment, estimates)` is told each segment's estimates as soon as they are known (early_reads)."""
    if not queries:
        return []
    q_words, owner = query_words(queries)
    stacked = np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])
    parts = []
    for seg in segments:
        estimates = seg.estimates(q_words, owner, stacked, len(queries), kernel=kernel)
        if scored is not None:
            scored(seg, estimates)
        parts.append(-estimates)
    if not parts:
        return [{} for _ in queries]
    distances = np.concatenate(parts, axis=1)
    bounds = np.cumsum([0] + [len(s.pages) for s in segments])
    chosen = []
    for row in distances:
        picked = np.sort(_smallest(row, candidates))
        split = np.searchsorted(picked, bounds)
        chosen.append({s.segment: picked[split[i] : split[i + 1]] - bounds[i]
                       for i, s in enumerate(segments) if split[i + 1] > split[i]})
    return chosen


def _smallest(row: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` smallest values; among equal values at the boundary, the earliest."""
    if count >= len(row):
        return np.arange(len(row))
    bound = np.partition(row, count - 1)[count - 1]
    below = np.flatnonzero(row < bound)
    return np.concatenate([below, np.flatnonzero(row == bound)[: count - len(below)]])


def two_pass(queries: Sequence[np.ndarray], segments: Sequence[SegmentCodes], vectors: Sequence[np.ndarray], candidates: int,
             k: int, kernel: str | None = None) -> list[list[tuple[str, int, float]]]:
    """Per query, the top `k` (segment, page, exact score) among its first-pass candidates, best first
    (ties: the earlier segment, then the earlier page). `vectors[i]` are segments[i]'s float16 rows."""
    picks = first_pass(queries, segments, candidates, kernel=kernel)
    answers = []
    for query, chosen in zip(queries, picks):
        hits: list[tuple[str, int, float]] = []
        for number, seg in enumerate(segments):
            if seg.segment in chosen:
                pages = seg.pages[chosen[seg.segment]]
                scores = maxsim([query], vectors[number], seg.offsets, pages)[0]
                hits += [(seg.segment, int(p), float(s)) for p, s in zip(pages, scores)]
        order = {seg.segment: i for i, seg in enumerate(segments)}
        hits.sort(key=lambda hit: (-hit[2], order[hit[0]], hit[1]))
        answers.append(hits[:k])
    return answers
