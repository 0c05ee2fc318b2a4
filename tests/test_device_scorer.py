"""The device scorer (index/scoring/device.py): exact MaxSim with the vectors resident on a torch device
or streamed to it, run here on the CPU with the device path forced (`--scorer device`); the same tests
with CUDA where a GPU is present (test_on_cuda_*). Scores within 1e-3 of the CPU scorer's float32
reference, blocks checked before they are scored, one pass for stacked queries, the resident vectors
dropped when serve moves to a new generation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, validate
from helpers import flip_byte
from docgen import make_pdf

from localgpt_index.index.scoring.device import DeviceScoring

ROOT = Path(__file__).resolve().parent.parent


class _Segment:
    """A segment in memory, as the scorer reads one (index.local.segments.SegmentFiles), its groups recorded."""

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray, group_pages: int = 7) -> None:
        self.vectors, self.offsets, self.group_pages = vectors, offsets, group_pages
        self.checked: list[int] = []

    def checked_groups(self, pages: np.ndarray):
        for start in range(0, len(pages), self.group_pages):
            part = pages[start : start + self.group_pages]
            self.checked += part.tolist()
            yield part


def _segment(seed: int, pages: int, same_length: int = 0) -> _Segment:
    rng = np.random.default_rng(seed)
    lengths = np.full(pages, same_length) if same_length else rng.integers(1, 90, size=pages)
    vectors = rng.standard_normal((int(lengths.sum()), 128)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return _Segment(vectors.astype(np.float16), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def _queries(seed: int, sizes=(20, 3, 31)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal((n, 128)).astype(np.float32) for n in sizes]
    return [q / np.linalg.norm(q, axis=1, keepdims=True) for q in out]


def _reference(queries, segment: _Segment, pages: np.ndarray) -> np.ndarray:
    """The CPU scorer (index.scoring.maxsim), float32: the reference."""
    from localgpt_index.index.scoring.maxsim import maxsim

    return maxsim(queries, segment.vectors, segment.offsets, pages)


def _top10(scores: np.ndarray) -> list[list[int]]:
    return [np.argsort(-row, kind="stable")[:10].tolist() for row in scores]


def test_the_scorer_is_chosen_by_the_model_device_and_the_option():
    assert DeviceScoring().device_for("cpu") is None  # auto: the CPU scorer for a model on the CPU
    assert DeviceScoring().device_for("cuda:1") == "cuda:1" and DeviceScoring().device_for("mps") is None
    assert DeviceScoring("device").device_for("mps") == "mps"
    assert DeviceScoring("cpu").device_for("cuda:0") is None
    assert DeviceScoring("device").device_for("cpu") == "cpu"  # forced: the device path on the CPU (these tests)


def test_scoring_options_are_checked_before_any_work(tmp_path):
    bad = run_cli("query", "x", "--max-resident", "lots", "--index-dir", str(tmp_path))
    assert bad.exit_code == 2 and "'lots' is not a size" in bad.stderr
    with_server = run_cli("query", "x", "--server", "http://127.0.0.1:9", "--scorer", "device", "--max-resident", "1G")
    assert with_server.exit_code == 2 and "--scorer, --max-resident cannot be used with --server" in with_server.stderr


@pytest.mark.slow  # torch
@pytest.mark.parametrize("budget", [None, 0, "one"], ids=["resident", "streamed", "one-resident"])
def test_scores_equal_the_cpu_reference(budget, monkeypatch):
    """Every score within 1e-3 of the CPU scorer's float32 reference and the top-10 identical, on
    pages of one length and of many, all pages and subsets, in several device chunks."""
    import localgpt_index.index.scoring.device as module

    monkeypatch.setattr(module, "SIM_BYTES", 4 * 60 * 300)  # ~300 rows a chunk for 60 stacked tokens: many chunks
    monkeypatch.setattr(module, "STREAM_ROWS", 500)
    ragged, uniform = _segment(1, 150), _segment(2, 60, same_length=33)
    limit = ragged.vectors.nbytes if budget == "one" else budget
    scorer = module.DeviceScorer("cpu", max_resident=limit)
    queries = _queries(3, (20, 9, 31))
    for name, segment in (("ragged", ragged), ("uniform", uniform)):
        every = np.arange(len(segment.offsets) - 1)
        for pages in (every, every[::3], every[5:9], every[-1:]):
            got = scorer.score(queries, name, segment, pages)
            expected = _reference(queries, segment, pages)
            assert got.shape == expected.shape == (3, len(pages))
            assert np.abs(got - expected).max() < 1e-3
            assert _top10(got) == _top10(expected)
    assert scorer.stats.passes == 8 and scorer.stats.last_stack == 3
    resident = {None: ["ragged", "uniform"], 0: [], "one": ["ragged"]}[budget]
    assert scorer.stats.uploads == resident
    assert scorer.stats.resident_bytes == sum(s.vectors.nbytes for n, s in (("ragged", ragged), ("uniform", uniform)) if n in resident)
    # the uniform segment: every page checked before it was read (at upload, or as each part streamed)
    assert set(uniform.checked) == set(range(60))


@pytest.mark.slow  # torch
def test_released_vectors_are_dropped_and_later_queries_stream():
    import gc
    import weakref

    from localgpt_index.index.scoring.device import DeviceScorer

    segment, queries = _segment(4, 40), _queries(5, (12,))
    scorer = DeviceScorer("cpu")
    first = scorer.score(queries, "s", segment, np.arange(40))
    kept = weakref.ref(scorer._resident["s"])
    scorer.release()
    gc.collect()
    assert kept() is None and scorer.stats.resident_bytes == 0
    again = scorer.score(queries, "s", segment, np.arange(40))
    assert scorer.stats.streamed_bytes == segment.vectors.nbytes and not scorer._resident
    np.testing.assert_array_equal(first, again)


def _index(fake_model, tmp_path: Path, documents: int = 4) -> Path:
    docs, index = tmp_path / "docs", tmp_path / "idx"
    for number in range(documents):
        make_pdf(docs / f"doc-{number}.pdf", [f"document {number} page {p}" for p in range(4)])
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert result.exit_code == 0, result.stderr
    return index


def _query(index: Path, *args: str) -> dict:
    result = run_cli("query", "document 2 page 1", "third", "-k", "8", "--mode", "visual", "--index-dir", str(index), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow  # torch
def test_query_json_says_the_device_scorer_answered(fake_model, tmp_path):
    index = _index(fake_model, tmp_path)
    cpu = _query(index)
    assert "scoring" not in cpu  # the model on the CPU: the CPU scorer, the document as before
    device = _query(index, "--scorer", "device")
    validate(device, "query")
    use = device["scoring"]["device"]
    assert device["scoring"]["path"] == "exact" and use["device"] == "cpu" and use["stacked_queries"] == 2
    assert use["resident_bytes"] > 0 and use["streamed_bytes"] == 0
    streamed = _query(index, "--scorer", "device", "--max-resident", "0")
    assert streamed["scoring"]["device"]["resident_bytes"] == 0 and streamed["scoring"]["device"]["streamed_bytes"] > 0
    for answer in (device, streamed):
        for theirs, ours in zip(cpu["queries"], answer["queries"]):
            assert [(h["path"], h["page"]) for h in ours["results"]] == [(h["path"], h["page"]) for h in theirs["results"]]
            assert all(abs(a["score"] - b["score"]) < 1e-3 for a, b in zip(ours["results"], theirs["results"]))
    first_pass = _query(index, "--scorer", "device", "--first-pass", "3")  # rescoring the candidates on the device
    assert first_pass["scoring"]["path"] == "first-pass" and first_pass["scoring"]["device"]["device"] == "cpu"


@pytest.mark.slow  # torch
@pytest.mark.parametrize("limit", ["1G", "0"], ids=["resident", "streamed"])
def test_a_damaged_block_is_refused_by_the_device_scorer(fake_model, tmp_path, limit):
    index = _index(fake_model, tmp_path)
    [vectors] = (index / "default").glob("**/segments/*.vectors.npy")
    flip_byte(vectors, vectors.stat().st_size - 100)  # one byte of the last page's vectors
    result = run_cli("query", "document", "--mode", "visual", "--index-dir", str(index), "--scorer", "device", "--max-resident", limit)
    assert result.exit_code == 1 and "damaged" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # torch
def test_serve_scores_a_batch_in_one_device_pass_and_drops_an_old_generations_vectors(fake_model, tmp_path):
    import gc
    import weakref

    from localgpt_index.query.request import QueryRequest
    from localgpt_index.serve.service import IndexService

    index = _index(fake_model, tmp_path)
    service = IndexService(index / "default")
    service.scoring = DeviceScoring("device")
    service.load()
    requests = [QueryRequest(queries=("document 1 page 2",), k=5, mode="visual"),
                QueryRequest(queries=("document 3", "page 0"), k=5, mode="visual")]
    alone = [service.search([request])[0].results for request in requests]
    old = service.index()
    scorer = old._device_scorer
    passes = scorer.stats.passes
    together = service.search(requests)  # what QueryBatcher does with requests that arrive together
    for answer, expected in zip(together, alone):
        for ours, theirs in zip(answer.results, expected):
            assert [(h.path, h.page) for h in ours] == [(h.path, h.page) for h in theirs]
            assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)
    assert scorer.stats.passes == passes + len(old.manifest.segments) and scorer.stats.last_stack == 3
    [resident] = list(scorer._resident.values())
    kept = weakref.ref(resident)
    del resident, together
    make_pdf(tmp_path / "docs" / "extra.pdf", ["another document"])
    assert run_cli("build", str(tmp_path / "docs"), "--index-dir", str(index)).exit_code == 0
    new = service.index()
    assert new is not old and service.switches == 1
    gc.collect()
    assert kept() is None and scorer.stats.resident_bytes == 0  # released at the switch, though `old` is still referenced
    service.search(requests)
    assert new._device_scorer is not scorer and new._device_scorer.stats.resident_bytes > 0


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device (run where a GPU is lent: docs/performance.md, On a GPU)")
@pytest.mark.parametrize("budget", [None, 0], ids=["resident", "streamed"])
def test_on_cuda_scores_equal_the_cpu_reference(budget):
    """On a GPU: float16 products into float32 with the residual half (float32 queries) or without it
    (queries a float16 model made), resident and streamed through pinned buffers."""
    from localgpt_index.index.scoring.device import DeviceScorer

    scorer = DeviceScorer("cuda", max_resident=budget)
    for name, segment in (("ragged", _segment(1, 400)), ("uniform", _segment(2, 300, same_length=1030))):
        for queries in (_queries(3), [q.astype(np.float16).astype(np.float32) for q in _queries(4)]):
            every = np.arange(len(segment.offsets) - 1)
            for pages in (every, every[::5]):
                got = scorer.score(queries, name, segment, pages)
                expected = _reference(queries, segment, pages)
                assert np.abs(got - expected).max() < 1e-3
                assert _top10(got) == _top10(expected)


@pytest.mark.slow  # torch; a small run of the GPU bench's query mode on the CPU
def test_the_gpu_bench_query_mode_runs_on_the_cpu_and_agrees_with_the_cpu_scorer(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--query", "--device", "cpu", "--pages", "500",
                             "--tokens", "64", "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["pages"] == 500 and report["vector_bytes"] == 500 * 64 * 128 * 2
    for mode in ("resident", "streamed"):
        for stack in ("one", "stacked"):
            timing = report[mode][stack]
            assert timing["ms_per_query"] > 0 and timing["bound_ms"] > 0 and 0 < timing["share_of_bound"]
    assert report["top10_identical"] is True and report["max_score_difference"] < 1e-3
    assert "one query" in result.stdout and "bandwidth bound" in result.stdout


@pytest.mark.slow  # torch
def test_a_device_out_of_memory_on_upload_streams_instead(monkeypatch):
    import torch

    from localgpt_index.index.scoring.device import DeviceScorer

    def no_room(self, files):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    segment, queries = _segment(6, 30), _queries(7, (9,))
    scorer = DeviceScorer("cpu")
    monkeypatch.setattr(DeviceScorer, "_upload", no_room)
    got = scorer.score(queries, "s", segment, np.arange(30))
    assert scorer.stats.streamed_bytes == segment.vectors.nbytes and scorer.stats.resident_bytes == 0
    assert np.abs(got - _reference(queries, segment, np.arange(30))).max() < 1e-3


@pytest.mark.slow  # torch
def test_queries_queued_while_serve_is_busy_are_scored_in_one_device_pass(fake_model, tmp_path):
    """QueryBatcher (serve's): a first request answered, three more arrive while the encoder thread is
    held before its second forward pass; they are answered by one model call and one device pass with
    their three queries stacked."""
    import asyncio
    import threading

    from localgpt_index.core import failpoints
    from localgpt_index.serve.batcher import QueryBatcher
    from localgpt_index.query.request import QueryRequest
    from localgpt_index.serve.service import IndexService

    index = _index(fake_model, tmp_path)
    service = IndexService(index / "default")
    service.scoring = DeviceScoring("device")
    service.load()
    held, release, reached = threading.Event(), threading.Event(), []

    def hook(name: str) -> None:
        if name == "serve.batch":
            reached.append(name)
            if len(reached) == 2:  # the encoder thread, back for what arrived after the first request
                held.set()
                release.wait(timeout=60)


    async def scenario() -> list:
        batcher = QueryBatcher(service)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(QueryRequest(queries=("document 0",), k=3, mode="visual")))
        await asyncio.get_running_loop().run_in_executor(None, held.wait, 60)
        await asyncio.wait_for(asyncio.shield(first), 60)
        rest = [asyncio.ensure_future(batcher.submit(QueryRequest(queries=(f"document {n} page 1",), k=3, mode="visual")))
                for n in (1, 2, 3)]
        while batcher.queued < 3:
            await asyncio.sleep(0)  # the three are in the queue, behind the held batch
        release.set()
        answers = await asyncio.gather(first, *rest)
        await batcher.stop()
        return answers

    failpoints.set_hook(hook)
    try:
        answers = asyncio.run(scenario())
    finally:
        failpoints.set_hook(None)
    scorer = service.index()._device_scorer
    assert [answer.batch_queries for answer in answers] == [1, 3, 3, 3]
    assert scorer.stats.last_stack == 3  # the last device pass scored the three queued queries together
    for number, answer in enumerate(answers):  # each the answer its request gets alone
        alone = service.search([QueryRequest(queries=(("document 0",) if number == 0 else (f"document {number} page 1",)), k=3,
                                             mode="visual")])[0]
        assert [(h.path, h.page) for h in answer.results[0]] == [(h.path, h.page) for h in alone.results[0]]
