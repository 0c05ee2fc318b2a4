"""PathPolicy.publish copies only what it changes: the document it was given (shared with the CLI's
builders) stays as it was, and every hit of the answer is published, at the top and under queries."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from localgpt_index.core.types import SearchHit
from localgpt_index.serve.httpguard import PathPolicy


def _index(root: str) -> SimpleNamespace:
    documents = [SimpleNamespace(path=f"{root}/a/one.pdf"), SimpleNamespace(path=f"{root}/b/two.pdf")]
    manifest = SimpleNamespace(generation=3, documents=documents, failures=[],
                               model=SimpleNamespace(id="/models/colpali", path="/models/colpali"))
    return SimpleNamespace(manifest=manifest, store=SimpleNamespace(location="/srv/indexes/default"))


def _hit(path: str) -> dict:
    return SearchHit(1, 0.5, path, 2, "0" * 64, "pdf", {"team": "finance"}).to_dict()


def test_publish_leaves_the_given_document_as_it_was_and_publishes_every_hit() -> None:
    hits = [_hit("/docs/a/one.pdf"), _hit("/docs/b/two.pdf")]
    document = {"version": 1, "index": "/srv/indexes/default", "model": "/models/colpali", "k": 2,
                "queries": [{"query": "q", "results": hits}], "query": "q", "results": hits}
    before = copy.deepcopy(document)
    published = PathPolicy().publish(document, _index("/docs"))
    assert document == before
    assert [h["path"] for h in published["results"]] == ["a/one.pdf", "b/two.pdf"]
    assert [h["path"] for h in published["queries"][0]["results"]] == ["a/one.pdf", "b/two.pdf"]
    assert (published["index"], published["model"]) == ("default", "colpali")
    assert published["results"][0]["metadata"] == {"team": "finance"}


def test_a_hit_as_a_dict_is_a_copy() -> None:
    metadata = {"team": "finance"}
    hit = SearchHit(1, 0.5, "/docs/a.pdf", 1, "0" * 64, "pdf", metadata)
    as_dict = hit.to_dict()
    as_dict["metadata"]["team"] = "legal"
    assert metadata == {"team": "finance"}
    assert as_dict == {"rank": 1, "score": 0.5, "path": "/docs/a.pdf", "page": 1, "sha256": "0" * 64, "kind": "pdf",
                       "metadata": {"team": "legal"}}


@pytest.mark.slow
def test_the_scorer_s_threads_score_with_one_torch_thread_each(monkeypatch) -> None:
    """Each scorer thread runs one torch thread (a team of torch threads each oversubscribed the cores);
    the process's own count, and a new thread's, are unchanged."""
    import threading

    import numpy as np
    import torch

    import localgpt_index.index.score as score_module

    monkeypatch.setattr(score_module, "SCORE_WORKERS", 2)
    monkeypatch.setattr(score_module, "kernel_policy", score_module.KernelPolicy.fixed(None))  # torch's path: no kernel
    threads = torch.get_num_threads()
    seen: list[int] = []
    real = score_module._best_per_page
    monkeypatch.setattr(score_module, "_best_per_page", lambda *a, **kw: (seen.append(torch.get_num_threads()), real(*a, **kw))[1])
    offsets = np.arange(0, 20_001, 20)  # several chunks: scored on the pool
    vectors = np.random.default_rng(3).standard_normal((20_000, 64)).astype(np.float16)
    score_module.maxsim([np.ones((4, 64), dtype=np.float32)], vectors, offsets)
    fresh: list[int] = []
    probe = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    probe.start()
    probe.join()
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == threads and fresh == [threads]


def _generation(number: int, documents: list[str], location: str = "/srv/indexes/default",
                model: str = "/models/colpali") -> SimpleNamespace:
    manifest = SimpleNamespace(generation=number, documents=[SimpleNamespace(path=p) for p in documents], failures=[],
                               model=SimpleNamespace(id=model, path=model))
    return SimpleNamespace(manifest=manifest, store=SimpleNamespace(location=location))


def test_an_error_names_a_document_as_the_current_generation_publishes_it() -> None:
    """An older generation's root under the current one's does not shorten the current one's paths."""
    policy = PathPolicy()
    policy.learn(_generation(1, ["/data/docs/reports/a.pdf", "/data/docs/reports/b/c.pdf"]))
    current = _generation(2, ["/data/docs/reports/a.pdf", "/data/docs/memo.pdf"])
    policy.learn(current)
    published = policy.publish({"index": "/srv/indexes/default", "results": [_hit("/data/docs/reports/a.pdf")]}, current)
    assert published["results"][0]["path"] == "reports/a.pdf"
    assert policy.message("/data/docs/reports/a.pdf: unreadable") == "reports/a.pdf: unreadable"


def test_a_message_is_rewritten_in_one_pass() -> None:
    """What one replacement writes is not read again by the next; a root of / leaves other slashes alone."""
    policy = PathPolicy()
    policy.learn(_generation(1, ["/data/a.pdf"], location="colpali/index"))
    assert policy.message("model /models/colpali/index") == "model colpali/index"
    policy.learn(_generation(2, ["/data/a.pdf", "/home/b.pdf"]))
    assert policy.message("/home/b.pdf and 3/4 pages, see /models/colpali") == "home/b.pdf and 3/4 pages, see colpali"
