"""The Qdrant store's first pass: binary quantization of the page multi-vectors (one bit a dimension),
queried exactly by default (the codes ignored) and, with --first-pass N|auto, scored by the codes then
rescored with the original vectors (index/qdrant/quantization.py). The client's in-process mode stores
the configuration but always scores exactly, so what is tested here is what can be: the collection's
configuration, the migration sent to an older collection, the search parameters every query sends,
what query --json says answered, and results equal to exact; and that a Qdrant store writes no
binary-codes blobs of its own (older collections that have them keep working)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from docgen import make_pdf
from helpers import build_ok


def _docs(folder: Path, count: int = 4) -> Path:
    for n in range(count):
        make_pdf(folder / f"report-{n}.pdf", [f"report {n} page {p} budget figures" for p in range(1 + n % 2)])
    return folder


def _url(tmp_path: Path, collection: str = "docs") -> str:
    return f"qdrant+path://{tmp_path / 'qd'}/{collection}"


def _open(url: str):
    from localgpt_index.index.open import open_store

    return open_store(url)


class Spy:
    """The store's client, recording the requests of every query_batch_points call."""

    def __init__(self, client) -> None:
        self.client, self.batches = client, []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def query_batch_points(self, collection, requests, **kwargs):
        self.batches.append(list(requests))
        return self.client.query_batch_points(collection, requests, **kwargs)


def _page_params(store):
    physical = store.physical()
    return store.client.get_collection(physical).config.params.vectors


@pytest.fixture
def built(fake_model, tmp_path):
    build_ok(str(_docs(tmp_path / "docs")), "--model", str(fake_model), "--store", _url(tmp_path))
    return tmp_path


def test_a_new_collection_quantizes_its_page_vectors_to_one_bit_and_stores_no_codes_blobs(built):
    store = _open(_url(built))
    try:
        vectors = _page_params(store)
        binary = vectors["page"].quantization_config.binary
        assert binary is not None and binary.always_ram is True  # the codes in RAM, the originals where they were
        assert vectors["pooled"].quantization_config is None
        manifest = store.open()
        assert all("codes" not in seg.parts and "text" in seg.parts for seg in manifest.segments.values())
        catalog = store.catalog_of(store.physical())
        blobs = [r.payload["blob"] for r in store.client.scroll(catalog, limit=10_000, with_payload=["kind", "blob"])[0]
                 if r.payload.get("kind") == "blob"]
        assert blobs and not [name for name in blobs if name.endswith(".codes")]
    finally:
        store.close()
    assert run_cli("verify", "--store", _url(built)).exit_code == 0


def test_queries_ignore_the_codes_by_default_and_ask_for_rescoring_with_the_first_pass(built):
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.scoring.codes.plan import AUTO_FROM_PAGES, DEFAULT_CANDIDATES

    store = _open(_url(built))
    try:
        view = store.open_view()
        spy = store._client = Spy(store.client)
        dim = next(iter(view.manifest.segments.values())).dim
        queries = [np.random.default_rng(seed).standard_normal((4, dim)).astype(np.float32) for seed in range(3)]

        exact = view.search_vectors(queries, 3)
        [requests] = spy.batches
        assert len(requests) == 3 and all(r.params.quantization.ignore is True for r in requests)

        first = view.search_vectors(queries, 3, first_pass=40)
        quantization = spy.batches[-1][0].params.quantization
        assert (quantization.ignore, quantization.rescore) == (False, True)
        assert quantization.oversampling == pytest.approx(40 / (3 + 16))  # Qdrant keeps oversampling x limit by the codes
        assert spy.batches[-1][0].prefetch is None  # no pooled-vector prefetch any more (lossy on needle queries)
        assert first == exact  # the in-process mode scores exactly whatever it is asked

        view.search_vectors(queries, 3, first_pass="auto")  # a small index: exact serves
        assert spy.batches[-1][0].params.quantization.ignore is True
        view.manifest = view.manifest.model_copy(update={"documents": view.manifest.documents * (AUTO_FROM_PAGES // 6 + 1)})
        assert view.page_count >= AUTO_FROM_PAGES
        with pytest.raises(IndexProblem, match="is damaged"):  # the catalog now names pages the collection lacks: its answer is short
            view.search_vectors(queries, 3, first_pass="auto")
        quantization = spy.batches[-1][0].params.quantization
        assert quantization.rescore is True and quantization.oversampling == pytest.approx(DEFAULT_CANDIDATES / 19)
    finally:
        store.close()


def test_query_json_says_the_in_process_mode_scored_exactly(built, fake_model):
    base = ["query", "report budget", "--model", str(fake_model), "--store", _url(built), "--json", "-k", "2", "--mode", "visual"]
    plain = json.loads(run_cli(*base).stdout)
    assert "scoring" not in plain  # without --first-pass: exact, as for a local index
    out = run_cli(*base, "--first-pass", "20")
    assert out.exit_code == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["scoring"]["path"] == "exact" and "in-process mode" in document["scoring"]["reason"]
    assert "server" in document["scoring"]["hint"]
    assert [(h["path"], h["page"]) for h in document["queries"][0]["results"]] == \
        [(h["path"], h["page"]) for h in plain["queries"][0]["results"]]
    auto = json.loads(run_cli(*base, "--first-pass", "auto").stdout)["scoring"]
    assert auto["path"] == "exact" and auto["reason"].startswith("auto: 6 pages <")


def _as_server(tmp_path: Path, client):
    """The store as a reader of a Qdrant server sees it (a URL), over the in-process client."""
    from localgpt_index.index.qdrant.store import QdrantStore
    from localgpt_index.index.qdrant.ids import parse_store_url

    return QdrantStore(parse_store_url("qdrant://qdrant.invalid:6333/docs"), tmp_path / "pdfs", client=client)


def test_a_server_collection_with_binary_quantization_answers_by_the_first_pass(built):
    store = _open(_url(built))
    try:
        view = _as_server(built, store.client).open_view()
        path = view.scoring_path(50)
        assert (path.path, path.candidates, path.hint) == ("first-pass", 50, None)
        assert "binary quantization" in path.reason and "rescored with the original vectors" in path.reason
        assert view.scoring_path(None).path == "exact" and view.scoring_path("auto").path == "exact"
    finally:
        store.close()


def test_an_older_collection_is_migrated_by_the_next_build_and_answers_exactly_meanwhile(fake_model, tmp_path, monkeypatch):
    from qdrant_client.local.qdrant_local import QdrantLocal

    from localgpt_index.index.qdrant import txn as qdrant_txn

    docs = _docs(tmp_path / "docs")
    with monkeypatch.context() as old:  # a collection as lgpt-index wrote it before binary quantization
        old.setattr(qdrant_txn, "binary_quantization", lambda: None)
        build_ok(str(docs), "--model", str(fake_model), "--store", _url(tmp_path))
    store = _open(_url(tmp_path))
    try:
        assert _page_params(store)["page"].quantization_config is None
        path = _as_server(tmp_path, store.client).open_view().scoring_path(50)
        assert path.path == "exact" and "no binary quantization" in path.reason and "any build adds it" in path.hint
    finally:
        store.close()

    sent = []
    original = QdrantLocal.update_collection

    def update_collection(self, collection_name, *args, **kwargs):
        sent.append((collection_name, kwargs.get("vectors_config")))
        return original(self, collection_name, *args, **kwargs)

    monkeypatch.setattr(QdrantLocal, "update_collection", update_collection)
    build_ok(str(docs), "--model", str(fake_model), "--store", _url(tmp_path))  # nothing changed: still migrates
    [(physical, vectors)] = sent
    assert physical.startswith("docs__") and vectors["page"].quantization_config.binary.always_ram is True
    assert run_cli("verify", "--store", _url(tmp_path)).exit_code == 0


def test_a_collection_with_codes_blobs_from_before_keeps_working(fake_model, tmp_path, monkeypatch):
    from localgpt_index.index.qdrant.txn import QdrantBackend

    docs = _docs(tmp_path / "docs", 2)
    with monkeypatch.context() as old:  # as written before: every segment with its "codes" part
        old.setattr(QdrantBackend, "unused_artifacts", frozenset())
        build_ok(str(docs), "--model", str(fake_model), "--store", _url(tmp_path))
    make_pdf(docs / "added.pdf", ["added later", "budget"])
    build_ok(str(docs), "--model", str(fake_model), "--store", _url(tmp_path))
    store = _open(_url(tmp_path))
    try:
        manifest = store.open()
        coded = [sid for sid, seg in manifest.segments.items() if "codes" in seg.parts]
        assert coded and len(coded) < len(manifest.segments)  # the old segments keep theirs, the new one has none
        view = store.open_view()
        dim = next(iter(manifest.segments.values())).dim
        assert view.search_vectors([np.ones((2, dim), dtype=np.float32)], 3, first_pass=10)[0]
    finally:
        store.close()
    verify = run_cli("verify", "--store", _url(tmp_path), "--json")
    assert verify.exit_code == 0 and json.loads(verify.stdout)["ok"] is True  # their blobs are still checked and kept
