"""Our MaxSim against its definition and colpali-engine's processor.score, in float32; the torch
and NumPy paths against each other (the fast tier, without torch, takes the NumPy one)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import localgpt_index.index.scoring.maxsim as score_module
from localgpt_index.index.scoring.kernel_policy import KernelPolicy
from localgpt_index.index.scoring.maxsim import best_rows, maxsim



def _unit(rng, n, dim=128):
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _reference(queries, pages):
    import torch

    from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

    # One page per call: colpali-engine pads ragged pages with zero vectors, and a
    # zero vector wins the max whenever all of a token's real similarities are negative.
    qs = [torch.from_numpy(q) for q in queries]
    columns = [
        BaseVisualRetrieverProcessor.score_multi_vector(qs, [torch.from_numpy(p.astype(np.float32))], device="cpu")
        for p in pages
    ]
    return torch.cat(columns, dim=1).numpy()


def _ragged(seed: int, pages: int = 40):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 90, size=pages)
    vectors = np.concatenate([_unit(rng, n) for n in lengths]).astype(np.float16)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return rng, vectors, offsets


def test_maxsim_is_the_sum_over_query_tokens_of_the_best_page_token(monkeypatch):
    rng, vectors, offsets = _ragged(3)
    queries = [_unit(rng, n) for n in (1, 9, 20)]
    monkeypatch.setattr(score_module, "CHUNK_ROWS", 200)  # several chunks, a page alone in some
    monkeypatch.setattr(score_module, "MIN_CHUNK_ROWS", 50)
    subset = np.array([30, 2, 17, 3])
    expected = [[float((q @ vectors[offsets[p] : offsets[p + 1]].astype(np.float32).T).max(axis=1).sum())
                 for p in subset] for q in queries]
    np.testing.assert_allclose(maxsim(queries, vectors, offsets, subset), expected, rtol=1e-5)


@pytest.mark.slow  # imports torch
def test_the_numpy_the_torch_and_the_compiled_paths_agree(monkeypatch):
    rng, vectors, offsets = _ragged(4, pages=120)
    queries = [_unit(rng, n) for n in (3, 17, 30, 8)]
    kernel = score_module.compiled_kernel()
    assert kernel is not None
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(kernel))
    compiled = maxsim(queries, vectors, offsets)
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(None))
    with_torch = maxsim(queries, vectors, offsets)
    np.testing.assert_allclose(compiled, with_torch, rtol=1e-5)
    monkeypatch.setattr(score_module, "torch_available", lambda: False)
    np.testing.assert_allclose(maxsim(queries, vectors, offsets), with_torch, rtol=1e-5)


def _best_rows_reference(query, pages, rows):
    sims = np.stack([page[rows].astype(np.float32) @ query.T for page in pages])  # (pages, rows, tokens)
    return sims.argmax(axis=1), sims.max(axis=1)


@pytest.mark.parametrize("rows", [np.arange(3, 67), np.array([0, 5, 6, 7, 40, 41, 70])], ids=["one-run", "scattered"])
def test_best_rows_are_where_each_tokens_maximum_is(rows):
    rng = np.random.default_rng(5)
    pages = [_unit(rng, 72).astype(np.float16) for _ in range(6)]
    query = _unit(rng, 9)
    at, top = best_rows(query, pages, rows)
    expected_at, expected_top = _best_rows_reference(query, pages, rows)
    assert at.shape == top.shape == (6, 9)
    np.testing.assert_array_equal(at, expected_at)
    np.testing.assert_allclose(top, expected_top, rtol=1e-5)
    assert best_rows(query, [], rows)[0].shape == (0, 9)


@pytest.mark.slow  # imports torch
@pytest.mark.parametrize("rows", [np.arange(13, 1037), np.concatenate([np.arange(2, 500), np.arange(520, 1030)])],
                         ids=["one-run", "two-runs"])
def test_best_rows_by_torch_and_by_numpy_agree(rows, monkeypatch):
    rng = np.random.default_rng(6)
    pages = [_unit(rng, 1037).astype(np.float16) for _ in range(10)]
    query = _unit(rng, 19)
    torch_rows, by_torch = score_module._best_rows_torch, []
    monkeypatch.setattr(score_module, "_best_rows_torch", lambda *args: by_torch.append(1) or torch_rows(*args))
    at, top = best_rows(query, pages, rows)
    assert by_torch  # (a product this big goes to torch)
    expected_at, expected_top = _best_rows_reference(query, pages, rows)
    np.testing.assert_array_equal(at, expected_at)
    np.testing.assert_allclose(top, expected_top, rtol=1e-5)
    monkeypatch.setattr(score_module, "torch_available", lambda: False)
    by_numpy = best_rows(query, pages, rows)
    np.testing.assert_array_equal(by_numpy[0], at)
    np.testing.assert_allclose(by_numpy[1], top, rtol=1e-5)
    assert len(by_torch) == 1


@pytest.mark.slow  # imports torch
def test_a_small_product_is_numpys_on_vectors_torch_widened_and_a_long_one_torchs(monkeypatch):
    """A query's hits on a small model (16 patches a page): torch widens the float16 vectors (F16C), NumPy multiplies;
    few tokens over many rows (a small product of many vectors) go to torch's thread, not to NumPy's slow widening."""
    rng = np.random.default_rng(7)
    pages, query, rows = [_unit(rng, 29).astype(np.float16) for _ in range(10)], _unit(rng, 20), np.arange(3, 19)
    widen, torch_rows, widened, by_torch = score_module._widened, score_module._best_rows_torch, [], []
    monkeypatch.setattr(score_module, "_widened", lambda block: widened.append(block.shape) or widen(block))
    monkeypatch.setattr(score_module, "_best_rows_torch", lambda *args: by_torch.append(1) or torch_rows(*args))
    at, top = best_rows(query, pages, rows)
    assert widened == [(160, 128)] and not by_torch
    expected_at, expected_top = _best_rows_reference(query, pages, rows)
    np.testing.assert_array_equal(at, expected_at)
    np.testing.assert_allclose(top, expected_top, rtol=1e-5)
    long_pages, rows = [_unit(rng, 1037).astype(np.float16) for _ in range(10)], np.arange(13, 1037)
    for page in long_pages:
        page.flags.writeable = False  # (as a memory-mapped index's: torch's warning about it reaches nobody)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = best_rows(query[:2], long_pages, rows)  # 20,480 similarities of 1.3 M values
        second = best_rows(query[2:5], long_pages[:6][::-1], rows)  # (the start of the thread's buffers, other values)
    assert by_torch == [1, 1] and len(widened) == 1
    for (at, top), asked, pages in ((first, query[:2], long_pages), (second, query[2:5], long_pages[:6][::-1])):
        expected_at, expected_top = _best_rows_reference(asked, pages, rows)
        np.testing.assert_array_equal(at, expected_at)
        np.testing.assert_allclose(top, expected_top, rtol=1e-5)
    with pytest.raises(RuntimeError):  # pages of another length than the layout's: refused, not split wrong
        best_rows(query[:2], [long_pages[0][:900], *long_pages[1:]], rows)


@pytest.mark.slow  # imports torch (the scorer's threads)
def test_queries_given_as_a_function_are_asked_for_when_a_scorer_thread_takes_the_first_chunk(monkeypatch):
    """serve's sweep gives a part's queries so: the part's members are those there when its scoring begins."""
    import threading

    rng, vectors, offsets = _ragged(5, pages=200)  # several of the kernel's chunks
    queries = [_unit(rng, n) for n in (20, 7)]
    kernel, calls = score_module.compiled_kernel(), []
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(lambda *a: (calls.append(1), kernel(*a))))
    monkeypatch.setattr(score_module, "KERNEL_CHUNK_ROWS", 500)
    monkeypatch.setattr(score_module, "SCORE_WORKERS", 2)  # the scorer's threads, even on one core
    asked = []

    def late():
        asked.append((threading.current_thread().name, len(calls)))
        return queries

    np.testing.assert_array_equal(maxsim(late, vectors, offsets), maxsim(queries, vectors, offsets))
    [(thread, scored_before)] = asked
    assert thread.startswith("lgpt-score") and scored_before == 0 and len(calls) > 4
    calls.clear()
    assert maxsim(lambda: [], vectors, offsets).shape == (0, 200) and not calls  # nobody on the part: nothing scored

    def failing():
        raise OSError("taken off")

    with pytest.raises(OSError, match="taken off"):
        maxsim(failing, vectors, offsets)
    assert not calls
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(None))  # torch's path: asked at once
    assert maxsim(lambda: [], vectors, offsets).shape == (0, 200)
    monkeypatch.setattr(score_module, "torch_available", lambda: False)
    assert maxsim(lambda: [], vectors, offsets).shape == (0, 200)


@pytest.mark.parametrize("numpy_path", [False, True], ids=["torch-if-installed", "numpy"])
def test_a_query_s_scores_do_not_depend_on_the_queries_asked_with_it(numpy_path, monkeypatch):
    """A server stacks concurrent questions into one pass: each scores as if asked alone, within
    float32 rounding (BLAS sums a dot product in an order that depends on the matrix shapes)."""
    if numpy_path:
        monkeypatch.setattr(score_module, "torch_available", lambda: False)
    rng, vectors, offsets = _ragged(6, pages=300)
    queries = [_unit(rng, n) for n in (20, 7, 31, 20, 12, 64, 3, 20)]
    stacked = maxsim(queries, vectors, offsets)
    for i, query in enumerate(queries):
        np.testing.assert_allclose(maxsim([query], vectors, offsets)[0], stacked[i], rtol=1e-6, err_msg=f"query {i}")


@pytest.mark.slow  # imports torch
def test_stacked_tokens_padded_for_the_product_leave_every_score_unchanged(monkeypatch):
    """Many stacked tokens are padded with zero rows to a multiple of 16 (the CPU product runs that far
    faster); the padding's maxima are in no query's sum."""
    import torch

    rng, vectors, offsets = _ragged(7, pages=200)
    queries = [_unit(rng, n) for n in (17, 20, 26, 19, 18, 22, 16, 17)]  # 155 tokens
    assert len(score_module._padded(torch.from_numpy(np.concatenate(queries)))) == 160
    assert len(score_module._padded(torch.from_numpy(queries[0]))) == 17  # a few tokens: multiplied tokens-first, as they are
    padded = maxsim(queries, vectors, offsets)
    monkeypatch.setattr(score_module, "TOKEN_ALIGN", 1)
    np.testing.assert_allclose(padded, maxsim(queries, vectors, offsets), rtol=1e-6)


@pytest.mark.slow  # colpali-engine and torch
@pytest.mark.parametrize("path", ["compiled", "torch-tokens-first", "torch-rows-first"])
@pytest.mark.parametrize("uniform", [True, False], ids=["equal-length-pages", "ragged-pages"])
def test_maxsim_equals_colpali_engine_score(uniform, path, monkeypatch):
    rng = np.random.default_rng(0)
    if path != "compiled":
        monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(None))
    else:
        real = score_module.compiled_kernel()
        assert real is not None  # numba is a dependency: no silent fallback
        calls = []
        monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(lambda *args: (calls.append(1), real(*args))))
    monkeypatch.setattr(score_module, "ROWS_FIRST_FROM", 1 if path == "torch-rows-first" else 10**9)
    lengths = [40] * 50 if uniform else list(rng.integers(5, 80, size=50))
    pages = [_unit(rng, n).astype(np.float16) for n in lengths]
    queries = [_unit(rng, n) for n in (7, 12, 20)]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vectors = np.concatenate(pages)
    monkeypatch.setattr(score_module, "CHUNK_ROWS", 300)  # force several chunks
    monkeypatch.setattr(score_module, "KERNEL_CHUNK_ROWS", 300)

    ours = maxsim(queries, vectors, offsets)
    theirs = _reference(queries, pages)
    np.testing.assert_allclose(ours, theirs, atol=1e-3)
    for row_ours, row_theirs in zip(ours, theirs):
        assert list(np.argsort(-row_ours, kind="stable")[:10]) == list(np.argsort(-row_theirs, kind="stable")[:10])
    if path == "compiled":
        assert len(calls) > 1  # the kernel scored it, a chunk a call


@pytest.mark.slow  # torch: the kernel is used (and warmed) where torch is
def test_warm_up_loads_the_kernel_once_in_a_thread_of_its_own(monkeypatch):
    import threading

    real, seen, done = score_module.compiled_kernel, [], threading.Event()
    monkeypatch.setattr(score_module, "compiled_kernel", lambda: (seen.append(threading.current_thread().name), done.set(), real())[2])
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy(lambda: score_module.compiled_kernel()))
    score_module.warm_up()
    score_module.warm_up()
    assert done.wait(60)
    assert seen == ["lgpt-score-warm-up"]


def test_maxsim_on_a_subset_of_pages():
    rng = np.random.default_rng(1)
    pages = [_unit(rng, 10).astype(np.float16) for _ in range(8)]
    offsets = np.arange(0, 90, 10, dtype=np.int64)
    query = [_unit(rng, 5)]
    full = maxsim(query, np.concatenate(pages), offsets)
    subset = maxsim(query, np.concatenate(pages), offsets, pages=np.array([6, 1, 3]))
    np.testing.assert_allclose(subset, full[:, [6, 1, 3]], rtol=1e-6)


def test_accumulation_is_float32_not_half():
    """Many small similarities: a float16 sum would drift visibly, ours must not."""
    dim = 128
    page = np.zeros((1, dim), dtype=np.float16)
    page[0, 0] = 0.3337
    query = np.zeros((2000, dim), dtype=np.float32)
    query[:, 0] = 1.0
    score = maxsim([query], page, np.array([0, 1]))[0, 0]
    assert abs(score - 2000 * float(page[0, 0])) < 1e-2


def _assert_same_hits(results, expected):
    """The same pages in the same order, scores equal within float32 rounding."""
    assert [[(h.path, h.page) for h in hits] for hits in results] == [[(h.path, h.page) for h in hits] for hits in expected]
    for hits, wanted in zip(results, expected):
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in wanted], rtol=1e-6)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_first_pass_with_every_page_is_exact_and_narrower_passes_return_exact_scores(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from bench_query import make_index, unit

    from localgpt_index.query.search import open_index

    make_index(tmp_path, 300)
    index = open_index(tmp_path)
    rng = np.random.default_rng(5)
    queries = [unit(rng, 20) for _ in range(3)]
    exact = index.search_vectors(queries, k=10)
    # scores within float32 rounding: the second pass scores each query alone, over other chunks
    _assert_same_hits(index.search_vectors(queries, k=10, first_pass=300), exact)
    narrow = index.search_vectors(queries, k=10, first_pass=25)
    every = {(h.path, h.page): h.score for h in index.search_vectors(queries[:1], k=300)[0]}
    for hit in narrow[0]:
        assert hit.score == pytest.approx(every[(hit.path, hit.page)], rel=1e-6)  # the second pass is exact
    assert [h.score for h in narrow[0]] == sorted((h.score for h in narrow[0]), reverse=True)
