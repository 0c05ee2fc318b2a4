"""Packed binary codes: the sign of each component, one bit a dimension (np.packbits).

16 bytes for a 128-dim vector (float16 takes 256). Rows are padded with zero bits to whole 64-bit words so that the
kernel reads them as uint64; a zero bit in both a query and a page code never counts in a hamming
distance, so the padding changes nothing.

Residual codes (codes version 2): a segment's vectors share large common components (ColPali's do; the
tiny checkpoint's rows at one position differ between pages by about 5 % of their norm), so the sign of
a vector says almost nothing about its page. Each row is coded instead as its nearest centroid of a
small per-segment codebook (k-means over the segment's first rows; a one-byte id) plus the sign of its
residual: v ~ centroid[id] + sigma * sign(v - centroid[id]), sigma the residuals' mean magnitude per
dimension (ColBERTv2's residual compression at one bit). q.v is then estimated as a table lookup
(q.centroid, per query token and centroid) plus a hamming term (kernel.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

ROWS_AT_ONCE = 65536  # rows packed at once: bounds the temporary boolean array whatever the segment size
CENTROIDS = 256  # a codebook's size at most: one byte an id. Measured (bench_first_pass.py): 64 lose recall
TRAIN_ROWS = 8192  # rows of a segment the codebook is learned from (its first), and Lloyd iterations
TRAIN_ITERATIONS = 6


def code_bytes(dim: int) -> int:
    """Bytes of one row's code: dim bits rounded up to whole 64-bit words."""
    return -(-dim // 64) * 8


def pack_codes(vectors: np.ndarray) -> np.ndarray:
    """(rows, dim) float vectors -> (rows, code_bytes(dim)) uint8: bit set where the sign bit is clear."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be (rows, dim), not {vectors.shape}")
    width = code_bytes(vectors.shape[1])
    codes = np.zeros((len(vectors), width), dtype=np.uint8)
    for start in range(0, len(vectors), ROWS_AT_ONCE):
        part = np.packbits(_positive(vectors[start : start + ROWS_AT_ONCE]), axis=1)
        codes[start : start + len(part), : part.shape[1]] = part
    return codes


def _positive(vectors: np.ndarray) -> np.ndarray:
    """Where the sign bit is clear (+0 counts as positive): read from the bits, many times faster than
    comparing float16 values."""
    if vectors.dtype == np.float16:
        return vectors.view(np.uint16) < 0x8000
    if vectors.dtype == np.float32:
        return vectors.view(np.uint32) < 0x80000000
    return np.signbit(vectors) == 0


def unpack_signs(codes: np.ndarray, dim: int) -> np.ndarray:
    """The inverse of pack_codes as +1/-1 float32 signs (+0 packs as +1, -0 as -1)."""
    bits = np.unpackbits(np.asarray(codes, dtype=np.uint8), axis=1)[:, :dim]
    return bits.astype(np.float32) * 2 - 1


def as_words(codes: np.ndarray) -> np.ndarray:
    """(rows, bytes) uint8 codes viewed as (rows, bytes / 8) uint64 words (no copy when contiguous)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    if codes.shape[1] % 8:
        raise ValueError(f"code rows of {codes.shape[1]} bytes are not whole 64-bit words")
    return codes.view(np.uint64).reshape(len(codes), codes.shape[1] // 8)


def query_words(queries: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stacked query tokens as (words, tokens) uint64, transposed so that the kernel's inner loop runs
    over tokens (vectorised), and each token's query number."""
    stacked = np.concatenate([np.asarray(q, dtype=np.float32) for q in queries])
    owner = np.repeat(np.arange(len(queries), dtype=np.int64), [len(q) for q in queries])
    return np.ascontiguousarray(as_words(pack_codes(stacked)).T), owner


@dataclass(frozen=True)
class Codebook:
    """A segment's centroids (k, dim) float32 and the residuals' mean magnitude per dimension (dim,)."""

    centroids: np.ndarray
    sigma: np.ndarray

    def to_bytes(self) -> bytes:
        return np.concatenate([self.centroids, self.sigma[None]]).astype("<f4").tobytes()

    @staticmethod
    def from_bytes(data: bytes, dim: int) -> "Codebook":
        table = np.frombuffer(data, dtype="<f4").reshape(-1, dim).astype(np.float32)
        return Codebook(table[:-1], table[-1])


def train_codebook(sample: np.ndarray, k: int = CENTROIDS, iterations: int = TRAIN_ITERATIONS) -> np.ndarray:
    """(min(k, rows), dim) float32 centroids: Lloyd's k-means from rows picked by a fixed seed (the same
    rows give the same codebook). An empty cluster keeps its previous centroid."""
    x = np.asarray(sample, dtype=np.float32)
    if not len(x):
        return np.zeros((1, x.shape[1]), dtype=np.float32)
    centroids = x[np.sort(np.random.default_rng(0).choice(len(x), min(k, len(x)), replace=False))].copy()
    for _ in range(iterations):
        ids = nearest(x, centroids)
        order = np.argsort(ids, kind="stable")
        present, starts, counts = np.unique(ids[order], return_index=True, return_counts=True)
        centroids[present] = np.add.reduceat(x[order], starts, axis=0) / counts[:, None]
    return centroids


def nearest(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each row's nearest centroid (euclidean) as uint8 ids (a codebook holds at most 256)."""
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    ids = np.empty(len(x), dtype=np.uint8)
    half_norms = (0.5 * (centroids**2).sum(axis=1)).astype(np.float32)
    kernel = _nearest_kernel()
    if kernel is not None and len(x) < ROWS_AT_ONCE:  # a page: compiled, in this thread
        kernel(x, centroids, half_norms, ids)
        return ids
    for start in range(0, len(x), ROWS_AT_ONCE):  # a whole segment (upgrade, k-means): BLAS
        ids[start : start + ROWS_AT_ONCE] = (x[start : start + ROWS_AT_ONCE] @ centroids.T - half_norms).argmax(axis=1)
    return ids


def _nearest_kernel() -> Callable[..., Any] | None:
    try:
        from ._compiled import nearest_kernel
    except ImportError:  # no numba: BLAS
        return None
    return nearest_kernel


def residual_codes(vectors: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes (rows, code_bytes) uint8: the residuals' signs, ids (rows,) uint8, the residuals' absolute
    sum per dimension (dim,) float64, for sigma)."""
    ids = nearest(vectors, centroids)
    residuals = np.asarray(vectors, dtype=np.float32) - centroids[ids]
    return pack_codes(residuals), ids, np.abs(residuals).sum(axis=0, dtype=np.float64)


def query_tables(queries: np.ndarray, codebook: Codebook) -> tuple[np.ndarray, np.ndarray]:
    """For stacked query tokens (tokens, dim): the table (centroids, tokens) float32 of q.centroid, and each
    token's weight w: q.v ~ table[id] + w/2 * (dim - 2 * hamming(sign(q), code)), i.e. the estimate's rank
    is that of table[id] - w * hamming. w = 2 * mean(|q| * sigma): the residual term with |q_d| sigma_d
    replaced by its mean, so that one popcount computes it."""
    q = np.asarray(queries, dtype=np.float32)
    table = np.ascontiguousarray((q @ codebook.centroids.T).T, dtype=np.float32)
    return table, (2 * (np.abs(q) * codebook.sigma).mean(axis=1)).astype(np.float32)


def code_segment(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, Codebook]:
    """A whole segment's (words (rows, words) uint64, ids, codebook), as CodesWriter writes them: the
    codebook learned from the first TRAIN_ROWS rows, every row coded against it."""
    centroids = train_codebook(np.asarray(vectors[:TRAIN_ROWS]))
    codes, ids, abs_sum = [], [], np.zeros(vectors.shape[1], dtype=np.float64)
    for start in range(0, len(vectors), ROWS_AT_ONCE):
        part_codes, part_ids, part_abs = residual_codes(vectors[start : start + ROWS_AT_ONCE], centroids)
        codes.append(part_codes)
        ids.append(part_ids)
        abs_sum += part_abs
    words = as_words(np.concatenate(codes)) if codes else np.zeros((0, code_bytes(vectors.shape[1]) // 8), dtype=np.uint64)
    ids_all = np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint8)
    return words, ids_all, Codebook(centroids, (abs_sum / max(len(vectors), 1)).astype(np.float32))
