"""`serve`'s queries overlap on the scorer's threads without touching torch's process-wide settings:
no call of torch.set_num_threads (or its inter-op twin) while they run, and the count another
thread sees never moves."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import run_cli
from docgen import make_pdf


@pytest.mark.slow  # the torch scorer
def test_overlapping_service_queries_change_no_process_wide_torch_setting(fake_model, tmp_path, monkeypatch):
    import torch

    import localgpt_index.index.scoring.maxsim as score_module
    from localgpt_index.query.request import QueryRequest
    from localgpt_index.serve.service import IndexService

    docs, index = tmp_path / "docs", tmp_path / "idx"
    for number in range(6):
        make_pdf(docs / f"doc-{number}.pdf", [f"page {number} {p}" for p in range(5)])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    monkeypatch.setattr(score_module, "SCORE_WORKERS", 2)  # the scorer's threads, even on one core
    monkeypatch.setattr(score_module, "CHUNK_ROWS", 1)  # a chunk a page: every query uses both threads
    monkeypatch.setattr(score_module, "MIN_CHUNK_ROWS", 1)
    monkeypatch.setattr(score_module, "kernel_policy", score_module.KernelPolicy.fixed(None))  # torch's path throughout
    service = IndexService(index / "default")
    service.load()
    requests = [QueryRequest(queries=(f"page {n}", f"doc {n}"), k=5) for n in range(4)]
    expected = [answer.results for answer in service.search(requests)]  # the scorer's threads start here, once
    before = torch.get_num_threads()
    calls: list[tuple[str, int]] = []
    for name in ("set_num_threads", "set_num_interop_threads"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda n, name=name, real=real: (calls.append((name, n)), real(n))[1])
    seen: set[int] = set()
    done = threading.Event()

    def observe() -> None:  # another thread's view of torch's count, all the while
        while not done.is_set():
            seen.add(torch.get_num_threads())

    together = threading.Barrier(4)
    answers: list = []

    def client(request: QueryRequest) -> None:
        for _ in range(5):
            together.wait(timeout=60)  # the four calls start together and overlap
            answers.append((request, service.search([request])[0].results))

    observer = threading.Thread(target=observe)
    observer.start()
    clients = [threading.Thread(target=client, args=(r,)) for r in requests]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(timeout=300)
    done.set()
    observer.join()
    assert len(answers) == 20 and calls == [] and seen == {before}
    assert torch.get_num_threads() == before
    for request, results in answers:
        want = expected[requests.index(request)]
        assert [[(h.path, h.page) for h in hits] for hits in results] == [[(h.path, h.page) for h in hits] for hits in want]
        for hits, wanted in zip(results, want):
            np.testing.assert_allclose([h.score for h in hits], [h.score for h in wanted], rtol=1e-5)


@pytest.mark.parametrize("users", [None, "50000"], ids=["default", "the-user-s-value-wins"])
def test_serve_sets_a_short_openmp_spin_before_torch_loads(users, fake_model, tmp_path, monkeypatch):
    """An idle OpenMP worker of the model's encoding spun milliseconds of a core after every query
    while the scorer's threads wanted them all: `serve` asks GNU OpenMP for a short spin, once, at
    start (before torch is loaded, when it still counts), unless the user set one."""
    import os
    import sys

    import localgpt_index.serve.runner as runner

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "a.pdf", ["a"])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)  # restored after the test, whatever serve sets
    if users:
        monkeypatch.setenv("GOMP_SPINCOUNT", users)
    seen = {}

    def fake_run_server(service, *args, **options):
        seen.update(spin=os.environ.get("GOMP_SPINCOUNT"), torch="torch" in sys.modules)

    monkeypatch.setattr(runner, "run_server", fake_run_server)
    loaded = "torch" in sys.modules  # by an earlier test of a mixed run: then too late, and left alone
    result = run_cli("serve", "--index-dir", str(index))
    assert result.exit_code == 0, result.stderr
    assert seen == {"spin": users or (None if loaded else "1000"), "torch": loaded}


@pytest.mark.slow  # the torch scorer
def test_a_single_chunk_is_scored_on_a_scorer_thread_not_the_callers(monkeypatch):
    """A rescoring's few candidates of a segment make one chunk: scored on the calling thread, its ops
    ran on torch's team of threads, 10-20x slower on a loaded machine than on a one-thread scorer."""
    from localgpt_index.index.scoring import maxsim as score

    if score.SCORE_WORKERS <= 1:
        pytest.skip("one CPU: the calling thread is the scorer")
    monkeypatch.setattr(score, "kernel_policy", score.KernelPolicy.fixed(None))  # torch's path (the compiled kernel uses one thread anyway)
    names: list[str] = []
    real = score._score_chunks
    monkeypatch.setattr(score, "_score_chunks", lambda *args: names.append(threading.current_thread().name) or real(*args))
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((8, 16)).astype(np.float16)
    scores = score.maxsim([rng.standard_normal((3, 16)).astype(np.float32)], vectors, np.array([0, 4, 8]), np.array([1]))
    assert scores.shape == (1, 1) and names and all(name.startswith("lgpt-score") for name in names)
