"""The one BM25 weighting (Robertson/Sparck Jones, the Lucene form) of both stores.

    score(q, d) = sum over distinct query tokens t present in d of  idf(t) * tf_weight(tf, |d|)
    idf(t)      = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))            (never negative; Qdrant's IDF modifier)
    tf_weight   = tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))

N is the number of live pages, n_t how many of them hold t, |d| a page's token count and avgdl the
mean over live pages: pages of removed or replaced documents are not counted (the engine keeps
these statistics exact under deletion). tf_weight is what a Qdrant sparse vector stores per token;
idf is what its IDF modifier applies at query time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BM25:
    k1: float = 1.2
    b: float = 0.75

    @staticmethod
    def idf(pages: int, holding: int | np.ndarray) -> float | np.ndarray:
        """ln(1 + (N - n + 0.5) / (n + 0.5))"""
        return np.log1p((pages - np.asarray(holding, dtype=np.float64) + 0.5) / (np.asarray(holding, dtype=np.float64) + 0.5))

    def tf_weight(self, tf: np.ndarray | float, length: np.ndarray | float, avgdl: float) -> np.ndarray:
        """The saturated, length-normalised term frequency."""
        tf = np.asarray(tf, dtype=np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * np.asarray(length, dtype=np.float64) / max(avgdl, 1e-9))
        return tf * (self.k1 + 1.0) / (tf + norm)


WEIGHTING = BM25()
