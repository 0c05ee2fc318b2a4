"""The two passes: hamming MaxSim over every page's binary codes picks the best `candidates` pages
per query (over all segments together), then only those are scored exactly (index.score.maxsim over
the float16 vectors, `pages=` the candidates), so the scores returned are the exact ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..score import maxsim
from .kernel import hamming_maxsim
from .pack import query_words


@dataclass(frozen=True)
class SegmentCodes:
    """One segment's codes as uint64 words (rows, words), its row offsets per page, and the pages
    (indices in the segment) a query may return."""

    segment: str
    words: np.ndarray
    offsets: np.ndarray
    pages: np.ndarray


def first_pass(queries: Sequence[np.ndarray], segments: Sequence[SegmentCodes], candidates: int,
               kernel: str | None = None) -> list[dict[str, np.ndarray]]:
    """Per query, {segment: positions in that segment's `pages`, ascending} of the `candidates` pages with
    the smallest hamming MaxSim over all segments (ties: the earlier segment, then the earlier page)."""
    if not queries:
        return []
    q_words, owner = query_words(queries)
    parts = [hamming_maxsim(q_words, owner, len(queries), s.words, s.offsets, s.pages, kernel=kernel) for s in segments]
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
