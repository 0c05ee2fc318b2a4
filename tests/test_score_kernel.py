"""The CPU scorer's compiled kernel (index/scoring/kernel.py, numba) against a float64 reference:
every query-token count the microkernels split differently (1 to 3 vectors of 8, and more than one
group of 24), pages of odd lengths (blocks of 8 rows padded with a repeated row), other dimensions,
subnormal float16 values and all-negative similarities. No torch: the fast tier runs it."""

from __future__ import annotations

import numpy as np
import pytest

kernel = pytest.importorskip("localgpt_index.index.scoring.kernel")  # numba is a dependency; the codes need it too


def _best(queries: np.ndarray, vectors: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    out = np.full((len(starts), len(queries)), np.nan, dtype=np.float32)
    kernel.score_pages(vectors.view(np.uint16), starts, ends, kernel.query_columns(queries), out)
    return out


def _reference(queries: np.ndarray, vectors: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    q = queries.astype(np.float64)
    return np.array([(q @ vectors[a:b].astype(np.float64).T).max(axis=1) for a, b in zip(starts, ends)])


@pytest.mark.parametrize("tokens", [1, 7, 8, 9, 16, 20, 24, 25, 41, 49, 160])
@pytest.mark.parametrize("dim", [128, 3, 17])
def test_the_kernel_equals_float64_within_1e_3(tokens, dim):
    rng = np.random.default_rng(tokens * 1000 + dim)
    lengths = rng.integers(1, 40, size=23)  # odd row counts: most blocks of 8 are short at a page's end
    lengths[:3] = (1, 8, 9)
    vectors = (rng.standard_normal((int(lengths.sum()), dim)) / np.sqrt(dim)).astype(np.float16)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    ends = starts + lengths
    queries = (rng.standard_normal((tokens, dim)) / np.sqrt(dim)).astype(np.float32)
    order = rng.permutation(len(starts))  # pages in any order, as a rescoring's candidates come
    got = _best(queries, vectors, starts[order], ends[order])
    want = _reference(queries, vectors, starts[order], ends[order])
    assert np.abs(got - want).max() < 1e-5  # float32 sums of 128 terms: far inside the 1e-3 asked


def test_subnormal_halves_are_widened_exactly_not_flushed():
    dim = 128
    tiny = np.float16(2.0**-20)  # a float16 subnormal (the smallest normal is 2**-14)
    vectors = np.full((11, dim), tiny, dtype=np.float16)
    vectors[5] = np.float16(-(2.0**-24))  # the smallest subnormal, negative
    queries = np.full((3, dim), 2.0**10, dtype=np.float32)
    queries[1] *= -1  # its best row is the negative one
    got = _best(queries, vectors, np.array([0], dtype=np.int64), np.array([11], dtype=np.int64))
    assert got[0, 0] == got[0, 2] == np.float32(dim * 2.0**-10)  # exact: 0 if flushed
    assert got[0, 1] == np.float32(dim * 2.0**-14)


def test_all_negative_similarities_keep_their_max_not_zero():
    """A short block is padded with a repeated row, never with zeros: a zero row would win here."""
    rng = np.random.default_rng(2)
    page = -np.abs(rng.standard_normal((13, 128))).astype(np.float16) / 8
    queries = np.abs(rng.standard_normal((20, 128))).astype(np.float32) / 8
    got = _best(queries, page, np.array([0], dtype=np.int64), np.array([13], dtype=np.int64))
    assert (got < 0).all()
    np.testing.assert_allclose(got, _reference(queries, page, np.array([0]), np.array([13])), atol=1e-5)


def test_a_page_without_rows_scores_minus_infinity_like_torch_s_segment_max():
    vectors = np.ones((4, 16), dtype=np.float16)
    got = _best(np.ones((2, 16), dtype=np.float32), vectors, np.array([0, 2, 2], dtype=np.int64), np.array([2, 2, 4], dtype=np.int64))
    assert np.isneginf(got[1]).all() and (got[[0, 2]] == 16).all()
