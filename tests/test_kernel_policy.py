"""Where a process loads the CPU scorer's compiled kernel (index/scoring/kernel_policy.py): a one-shot query
scores by torch's path and never starts the load (it costs a fresh process about half a second); a
long-lived service loads it at start, beside its model; a pass large enough to pay loads it first. The
policy itself needs no torch (the fast tier); the processes that score with torch are in the slow tier."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import run_cli, run_process
from docgen import make_pdf

import localgpt_index.index.scoring.kernel_policy as policy_module
import localgpt_index.index.scoring.maxsim as score_module
from localgpt_index.index.scoring.kernel_policy import PAYS_FROM, PAYS_FROM_STARTED, ROW_TOKENS, KernelPolicy

ROWS = 1030  # a ColPali page


class Loads:
    """A stand-in for compiled_kernel: counts its calls and the threads they ran on; `gate`, when
    given, holds each call until it is set."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.threads: list[str] = []
        self.gate = gate
        self.began = threading.Event()
        self.kernel = lambda *args: None  # what the load returns (one object: `is` tells it)

    def __call__(self):
        self.threads.append(threading.current_thread().name)
        self.began.set()
        if self.gate is not None:
            assert self.gate.wait(60)
        return self.kernel


@pytest.fixture
def cold(monkeypatch):
    """numba not started in this process, whatever earlier tests ran: a load costs its full price."""
    monkeypatch.setattr(policy_module, "numba_started", lambda: False)


def _pages_for(work: int, tokens: int = 20) -> int:
    return -(-work // (ROWS * (tokens + ROW_TOKENS)))


def test_a_one_shot_query_s_pass_does_not_load_the_kernel(cold):
    loads = Loads()
    policy = KernelPolicy(loads)
    policy.expect(1000 * ROWS, 20)  # a 1,000-page index: torch's path is quicker than the load
    assert policy.choose(1000 * ROWS, 20) is None
    assert loads.threads == [] and not policy.started


def test_a_pass_that_pays_for_the_load_loads_the_kernel_first_on_the_calling_thread(cold):
    loads = Loads()
    policy = KernelPolicy(loads)
    pages = _pages_for(PAYS_FROM)
    policy.expect((pages - 1) * ROWS, 20)
    assert loads.threads == []
    policy.expect(pages * ROWS, 20)
    assert loads.threads == [threading.current_thread().name]
    assert policy.choose(ROWS, 20) is loads.kernel and policy.choose(ROWS, 1) is loads.kernel
    assert len(loads.threads) == 1


def test_a_process_that_keeps_scoring_loads_the_kernel_once_its_work_has_paid_for_it(cold):
    """The Python API's calls one after another: each small, together worth the load."""
    loads = Loads()
    policy = KernelPolicy(loads)
    per_call = 2000 * ROWS * (20 + ROW_TOKENS)
    calls = [policy.choose(2000 * ROWS, 20) for _ in range(-(-PAYS_FROM // per_call) + 2)]
    first = calls.index(loads.kernel)
    assert calls[:first] == [None] * first and first == -(-PAYS_FROM // per_call) - 1
    assert all(kernel is loads.kernel for kernel in calls[first:]) and len(loads.threads) == 1


def test_once_numba_has_started_a_rescoring_s_candidates_pay_for_the_load(monkeypatch):
    """After a binary first pass (its hamming kernel started numba) the load is milliseconds."""
    monkeypatch.setattr(policy_module, "numba_started", lambda: True)
    loads = Loads()
    policy = KernelPolicy(loads)
    policy.expect(300 * ROWS, 20)  # 300 candidates
    assert loads.threads and policy.loaded() is loads.kernel
    assert PAYS_FROM_STARTED <= 300 * ROWS * (20 + ROW_TOKENS) < PAYS_FROM


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_numba_started_says_whether_numba_s_costly_first_load_has_happened():
    probe = ("import sys, numba; from localgpt_index.index.scoring.kernel_policy import numba_started; before = numba_started(); "
             "numba.njit(lambda x: x + 1)(1); print(before, numba_started())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_a_warm_up_loads_on_a_thread_of_its_own_and_queries_meanwhile_do_not_wait(cold):
    gate = threading.Event()
    loads = Loads(gate)
    policy = KernelPolicy(loads)
    policy.warm_up()
    assert loads.began.wait(60)
    assert policy.choose(10**6 * ROWS, 20) is None  # however large: torch's path, no second load
    policy.expect(10**6 * ROWS, 20)
    assert policy.load() is None
    gate.set()
    policy._ready.wait(60)
    policy.warm_up()
    assert policy.choose(ROWS, 20) is loads.kernel and loads.threads == ["lgpt-score-warm-up"]


@pytest.fixture
def fake_index(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    for number in range(3):
        make_pdf(docs / f"doc-{number}.pdf", [f"doc {number} page {p}" for p in range(4)])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    return index


@pytest.fixture
def watched(monkeypatch):
    """This process as if torch were here (warm_up and expect_pass act only then), with a fresh policy
    whose load is recorded (no numba, no torch: nothing is scored by it)."""
    loads = Loads()
    monkeypatch.setattr(score_module, "torch_available", lambda: True)
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy(loads))
    return loads


def test_loading_the_query_encoder_does_not_start_the_kernel_s_load(fake_index, watched):
    from localgpt_index.query.search import open_index

    index = open_index(fake_index)
    index.load_encoder()
    assert not score_module.kernel_policy.started and watched.threads == []


def test_a_service_starts_the_kernel_s_load_on_its_own_thread_beside_the_model(fake_index, watched):
    from localgpt_index.serve.service import IndexService

    service = IndexService(fake_index / "default")
    service.load()
    assert service.ready and watched.began.wait(60)
    assert watched.threads == ["lgpt-score-warm-up"]


def test_a_service_is_warm_only_once_the_kernel_s_load_has_ended(fake_index, watched, monkeypatch):
    """/healthz says ready after the warm-up: by then the kernel is loaded, and the first client gets it."""
    from localgpt_index.serve.service import KERNEL_WAIT_S, IndexService

    service = IndexService(fake_index / "default")
    service.load()
    policy = score_module.kernel_policy
    waits: list[tuple[float | None, bool]] = []
    real_wait = policy.wait
    monkeypatch.setattr(policy, "wait", lambda timeout=None: (waits.append((timeout, service.warmed)), real_wait(timeout))[1])
    monkeypatch.setattr(service, "search", lambda requests: [])  # the warm-up query (torch's scorer: not in this tier)
    service.warm_up()
    assert waits == [(KERNEL_WAIT_S, False)] and service.warmed
    assert policy.loaded() is watched.kernel


def test_waiting_for_the_kernel_returns_at_once_where_no_load_began_and_else_when_it_ends(cold):
    assert KernelPolicy(Loads()).wait() is None
    gate = threading.Event()
    loads = Loads(gate)
    policy = KernelPolicy(loads)
    policy.warm_up()
    assert loads.began.wait(60)
    assert policy.wait(0) is None
    gate.set()
    assert policy.wait(60) is loads.kernel


def test_an_exact_pass_announces_its_rows_and_tokens(fake_index, monkeypatch):
    """The view tells the policy the size of a pass before scoring it (the numbers the load is decided on)."""
    import localgpt_index.index.view as view_module
    from localgpt_index.query.search import open_index

    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(view_module, "expect_pass", lambda rows, tokens: seen.append((rows, tokens)))
    index = open_index(fake_index)
    files = [index.store.segment_files(segment) for segment in index.manifest.segments.values()]
    dim = files[0].vectors.shape[1]
    queries = [np.ones((5, dim), dtype=np.float32), np.ones((7, dim), dtype=np.float32)]
    index.search_vectors(queries, k=3)
    assert seen == [(sum(int(f.offsets[-1]) for f in files), 12)]


@pytest.mark.slow  # torch scores the query
def test_a_one_shot_query_process_never_loads_the_kernel(tiny_model, tmp_path):
    """`lgpt-index query` in a process of its own, with a failpoint that kills it where a load of the
    kernel begins: it answers. The same failpoint does kill a process that loads it."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    for number in range(2):
        make_pdf(docs / f"doc-{number}.pdf", [f"invoice {number} page {p}" for p in range(3)])
    assert run_cli("build", str(docs), "--model", str(tiny_model), "--index-dir", str(index)).exit_code == 0
    env = {"LGPT_FAILPOINT": "score.kernel_load", "HF_HUB_OFFLINE": "1"}
    answered = run_process("query", "invoice 1", "--mode", "visual", "--json", "--index-dir", str(index), env=env)
    assert answered.returncode == 0, answered.stderr
    assert '"results"' in answered.stdout
    loads = subprocess.run([sys.executable, "-c", "from localgpt_index.index.scoring import maxsim; maxsim.kernel_policy.load()"],
                           env={**os.environ, **env}, capture_output=True, timeout=120)
    assert loads.returncode == -9


@pytest.mark.slow  # torch and the compiled kernel
def test_a_pass_that_pays_is_scored_by_the_kernel_alone_and_equals_torch_s(fake_index, monkeypatch):
    from localgpt_index.query.search import open_index

    index = open_index(fake_index)
    dim = index.store.segment_files(next(iter(index.manifest.segments.values()))).vectors.shape[1]
    queries = [np.random.default_rng(0).standard_normal((9, dim)).astype(np.float32)]
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy.fixed(None))
    with_torch = index.search_vectors(queries, k=8)
    real, calls = score_module.compiled_kernel(), []
    assert real is not None
    monkeypatch.setattr(score_module, "kernel_policy", KernelPolicy(lambda: lambda *args: (calls.append(1), real(*args))))
    monkeypatch.setattr(policy_module, "PAYS_FROM", 1)  # this small pass as if it were large
    monkeypatch.setattr(policy_module, "PAYS_FROM_STARTED", 1)
    torch_chunks: list[int] = []
    monkeypatch.setattr(score_module, "_score_chunks", lambda *args: torch_chunks.append(1))
    with_kernel = index.search_vectors(queries, k=8)
    assert calls and not torch_chunks
    assert [(h.path, h.page) for h in with_kernel[0]] == [(h.path, h.page) for h in with_torch[0]]
    np.testing.assert_allclose([h.score for h in with_kernel[0]], [h.score for h in with_torch[0]], rtol=1e-5)
