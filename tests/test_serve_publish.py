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
    document = {"version": 2, "index": "/srv/indexes/default", "model": "/models/colpali", "k": 2,
                "queries": [{"query": "q", "results": hits}], "query": "q"}
    before = copy.deepcopy(document)
    published = PathPolicy().publish(document, _index("/docs"))
    assert document == before
    assert [h["path"] for h in published["queries"][0]["results"]] == ["a/one.pdf", "b/two.pdf"]
    assert (published["index"], published["model"]) == ("default", "colpali")
    assert published["queries"][0]["results"][0]["metadata"] == {"team": "finance"}


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

    import localgpt_index.index.scoring.maxsim as score_module

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
    answers = [{"query": "q", "results": [_hit("/data/docs/reports/a.pdf")]}]
    published = policy.publish({"index": "/srv/indexes/default", "queries": answers}, current)
    assert published["queries"][0]["results"][0]["path"] == "reports/a.pdf"
    assert policy.message("/data/docs/reports/a.pdf: unreadable") == "reports/a.pdf: unreadable"


def test_a_message_is_rewritten_in_one_pass() -> None:
    """What one replacement writes is not read again by the next; a root of / leaves other slashes alone."""
    policy = PathPolicy()
    policy.learn(_generation(1, ["/data/a.pdf"], location="colpali/index"))
    assert policy.message("model /models/colpali/index") == "model colpali/index"
    policy.learn(_generation(2, ["/data/a.pdf", "/home/b.pdf"]))
    assert policy.message("/home/b.pdf and 3/4 pages, see /models/colpali") == "home/b.pdf and 3/4 pages, see colpali"


def test_a_prefix_matches_what_a_client_sees_and_an_absolute_one_is_refused() -> None:
    """Issue 39 #3: which documents a relative prefix selects depends only on the names a client sees (never
    on the root it does not see), and every absolute prefix is the same refusal, whatever it would match."""
    from localgpt_index.core.errors import UsageError

    index = _generation(1, ["/data/docs/a.pdf", "/data/docs/ab/c.pdf", "/data/docs/b.pdf"])
    policy = PathPolicy()
    seen = [entry["path"] for entry in policy.publish({"documents": [{"path": d.path} for d in index.manifest.documents]},
                                                      index)["documents"]]
    prefixes = {name[:end] for name in seen for end in range(len(name) + 1)} | {"..", "../docs/a", "./a", "docs/a", "x"}
    for prefix in prefixes:
        stored = policy.prefix(prefix, index)
        chosen = [name for name, doc in zip(seen, index.manifest.documents) if doc.path.startswith(stored)]
        assert chosen == [name for name in seen if name.startswith(prefix)], prefix
    refusals = set()
    for probe in ("/", "/d", "/data/docs", "/data/docs/a", "/elsewhere"):
        with pytest.raises(UsageError) as refused:
            policy.prefix(probe, index)
        refusals.add(refused.value.message)
    assert len(refusals) == 1 and "prefix: an absolute path" in refusals.pop()
    assert PathPolicy(absolute=True).prefix("/data/docs/a", index) == "/data/docs/a"  # --absolute-paths: as the CLI names them
