"""Packed binary codes: the sign of each vector component, one bit a dimension (np.packbits),
16 bytes for a 128-dim vector (float16 takes 256). Rows are padded with zero bits to whole 64-bit
words so that the kernel reads them as uint64; a zero bit in both a query and a page code never
counts in a hamming distance, so the padding changes nothing."""

from __future__ import annotations

from typing import Sequence

import numpy as np

ROWS_AT_ONCE = 65536  # rows packed at once: bounds the temporary boolean array whatever the segment size


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
