"""The Qdrant store's own text list: each page point carries a sparse lexical vector (our tokenizer,
BM25 term weights, Qdrant's IDF modifier scoped to the generation's visible points), fused by the
same code as the local store's, so both stores answer text and hybrid queries alike."""

from __future__ import annotations

import random

import pytest

from conftest import run_cli
from docgen import make_pdf

WORDS = ("budget travel invoice board report figures appendix costs freight audit ledger summary "
         "contract supplier delivery warehouse payment schedule review quarterly annual").split()
FACTS = ["invoice INV-2024-0042 was paid by ACME Logistics", "the zanzibar warehouse lease ends in May",
         "supplier Kestrel shipped 400 pallets of copper wire", "audit finding: ledger 7781 double-counted freight"]
QUESTIONS = ["who paid invoice INV-2024-0042?", "when does the zanzibar lease end", "how many pallets did Kestrel ship",
             "which ledger double-counted freight", "quarterly budget review", "copper wire delivery schedule",
             "annual report summary", "payment"]


def corpus_pages(seed: int = 7) -> dict[str, list[str]]:
    rng = random.Random(seed)
    corpus = {}
    for n in range(8):
        pages = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40))) for _ in range(2)]
        if n < len(FACTS):
            pages[n % 2] += " " + FACTS[n]
        corpus[f"doc-{n}.pdf"] = pages
    return corpus


def make_corpus(folder, seed: int = 7) -> None:
    for name, pages in corpus_pages(seed).items():
        make_pdf(folder / name, pages)


@pytest.fixture(scope="module")
def both(fake_model, tmp_path_factory):
    """One corpus, built into a local index and a Qdrant (in-process) store."""
    root = tmp_path_factory.mktemp("sparse")
    make_corpus(root / "docs")
    local = root / "local"
    url = f"qdrant+path://{root / 'qd'}/pages"
    for where in (["--index-dir", str(local)], ["--store", url]):
        done = run_cli("build", str(root / "docs"), "--model", str(fake_model), *where)
        assert done.exit_code == 0, done.stderr
    return {"root": root, "local": local, "url": url, "docs": root / "docs"}


def answers(index, mode: str, k: int = 10):

    results = index.search(QUESTIONS, k=k, mode=mode)
    # 7 places: the comparisons within rel=1e-5 meet no rounding edge
    return [[(hit.path.rsplit("/", 1)[-1], hit.page, round(hit.score, 7)) for hit in hits] for hits in results]


def qdrant_answers(url: str, mode: str = "text"):
    """answers() from the Qdrant store at `url`, opened for this call and closed."""
    from localgpt_index.index.open import open_store
    from localgpt_index.query.search import open_index

    store = open_store(url)
    try:
        return answers(open_index(store=store), mode)
    finally:
        store.close()


def assert_same_answers(theirs, mine, rel: float) -> None:
    """The same pages in the same order, scores equal within `rel`."""
    assert [[hit[:2] for hit in hits] for hits in theirs] == [[hit[:2] for hit in hits] for hits in mine]
    assert [hit[2] for hits in theirs for hit in hits] == pytest.approx([hit[2] for hits in mine for hit in hits], rel=rel)


def open_both(both):
    from localgpt_index.index.open import open_store
    from localgpt_index.query.search import open_index

    return open_index(both["local"]), open_index(store=open_store(both["url"]))


def test_points_carry_sparse_vectors_with_the_idf_modifier(both):
    from qdrant_client import models

    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant.sparse import SPARSE, page_vector, term_id

    store = open_store(both["url"])
    try:
        physical = store.physical()
        params = store.client.get_collection(physical).config.params
        assert params.sparse_vectors[SPARSE].modifier == models.Modifier.IDF
        points, _ = store.client.scroll(physical, limit=100, with_vectors=[SPARSE], with_payload=["page"])
        pages = [p for p in points if "page" in (p.payload or {})]
        assert len(pages) == 16 and all(SPARSE in p.vector for p in pages)
        vector = pages[0].vector[SPARSE]
        assert all(0 < value < 2.2 for value in vector.values)  # saturated: tf_weight < k1 + 1
    finally:
        store.close()
    assert term_id("invoice") == term_id("invoice") and term_id("invoice") != term_id("invoices")
    indices, values = page_vector("a a b", avgdl=3.0)
    assert len(indices) == 2 and values[indices.index(term_id("a"))] > values[indices.index(term_id("b"))]


def test_text_and_hybrid_top10_equal_the_local_store(both):
    local, remote = open_both(both)
    assert getattr(remote.view, "text_search")(["invoice"], 5)[0], "the Qdrant text list comes from its sparse vectors"
    for mode in ("text", "hybrid"):
        mine, theirs = answers(local, mode), answers(remote, mode)
        for question, a, b in zip(QUESTIONS, mine, theirs):
            assert [hit[:2] for hit in a] == [hit[:2] for hit in b], (mode, question, a, b)
            assert [hit[2] for hit in a] == pytest.approx([hit[2] for hit in b], rel=1e-4)


def test_removed_and_pending_points_do_not_count_in_the_idf(both, fake_model, tmp_path):
    """After a remove the removed document's points still exist (gen_removed) until a later commit
    collects them; scoped to the visible points, Qdrant's IDF equals the local engine's. Unscoped
    (Qdrant's default, collection-wide), they skew it: measured here."""
    from conftest import copy_tree

    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant.ids import visible_filter
    from localgpt_index.index.qdrant.sparse import SPARSE, query_vector
    from localgpt_index.index.text.query import parse
    from localgpt_index.query.search import open_index

    root = tmp_path / "copy"
    copy_tree(both["root"], root)
    local, url = root / "local", f"qdrant+path://{root / 'qd'}/pages"
    for where in (["--index-dir", str(local)], ["--store", url]):
        gone = run_cli("remove", str(both["docs"] / "doc-0.pdf"), *where)
        assert gone.exit_code == 0, gone.stderr
    mine = answers(open_index(local), "text")
    store = open_store(url)
    try:
        theirs = answers(open_index(store=store), "text")
        assert [[hit[:2] for hit in hits] for hits in mine] == [[hit[:2] for hit in hits] for hits in theirs]
        # the IDF is exact; the pages kept their vectors' avgdl, the remove changed the mean: a small drift
        drift = max(abs(a[2] - b[2]) / a[2] for hits_a, hits_b in zip(mine, theirs) for a, b in zip(hits_a, hits_b))
        assert drift < 2e-3
        # unscoped (Qdrant's default, collection-wide) IDF counts doc-0's removed points still in the collection
        from qdrant_client import models

        requests = [models.QueryRequest(query=models.SparseVector(indices=query_vector(parse(q))[0], values=query_vector(parse(q))[1]),
                                        using=SPARSE, filter=visible_filter(store.open().generation), limit=10,
                                        with_payload=["page"]) for q in QUESTIONS]
        unscoped = store.client.query_batch_points(store.physical(), requests)
        skew = max(abs(answer.points[0].score - hits[0][2]) / hits[0][2] for answer, hits in zip(unscoped, theirs) if hits)
        print(f"top-score error: scoped IDF {drift:.2e} (avgdl drift only), unscoped IDF {skew:.2e}")
        assert skew > 10 * drift
    finally:
        store.close()



@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_collection_without_the_sparse_vector_answers_from_fts5_until_a_rebuild(both, fake_model, tmp_path, monkeypatch):
    """A collection made before the sparse vector: text lists come from the FTS5 artifact (the same
    answers); `build --rebuild` makes a collection with it, and from then on Qdrant answers."""
    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant import txn as qdrant_txn
    from localgpt_index.index.qdrant.sparse import SPARSE
    from localgpt_index.query.search import open_index

    url = f"qdrant+path://{tmp_path / 'qd'}/old"
    with monkeypatch.context() as patch:
        patch.setattr(qdrant_txn, "sparse_config", lambda: None)  # as collections were created before
        done = run_cli("build", str(both["docs"]), "--model", str(fake_model), "--store", url)
        assert done.exit_code == 0, done.stderr
    mine = answers(open_index(both["local"]), "text")
    for rebuilt in (False, True):
        if rebuilt:
            done = run_cli("build", str(both["docs"]), "--model", str(fake_model), "--store", url, "--rebuild")
            assert done.exit_code == 0, done.stderr
        store = open_store(url)
        try:
            params = store.client.get_collection(store.physical()).config.params
            assert (SPARSE in (params.sparse_vectors or {})) is rebuilt
            index = open_index(store=store)
            assert (index.view.text_search(["invoice"], 5) is not None) is rebuilt
            assert [[hit[:2] for hit in hits] for hits in answers(index, "text")] == [[hit[:2] for hit in hits] for hits in mine]
        finally:
            store.close()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_build_killed_before_head_leaves_its_sparse_points_out_of_the_idf(both, fake_model, tmp_path):
    """kill -9 after the commit wrote the new pages' sparse vectors, before HEAD moved: those points
    exist in the collection, invisible; text answers stay the old generation's, scores exactly the
    local engine's. The next build commits them, and both stores agree again."""
    from conftest import copy_tree, run_process

    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant.sparse import SPARSE
    from localgpt_index.query.search import open_index

    root = tmp_path / "copy"
    copy_tree(both["root"], root)  # the same indexes and documents at another path: pages of other paths are copied
    local, url = root / "local", f"qdrant+path://{root / 'qd'}/pages"
    make_pdf(root / "docs" / "doc-9.pdf", ["invoice payment invoice ledger quarterly"])
    killed = run_process("build", str(root / "docs"), "--model", str(fake_model), "--store", url,
                         env={"LGPT_FAILPOINT": "before-head"})
    assert killed.returncode == -9, killed.stderr
    store = open_store(url)
    try:
        points, _ = store.client.scroll(store.physical(), limit=200, with_vectors=[SPARSE], with_payload=["path", "visible_from"])
        staged = [p for p in points if str((p.payload or {}).get("path", "")).endswith("doc-9.pdf")]
        assert staged and all(SPARSE in p.vector for p in staged)  # the killed commit wrote them
        theirs = answers(open_index(store=store), "text")
    finally:
        store.close()
    mine = answers(open_index(local), "text")
    assert_same_answers(theirs, mine, rel=1e-5)
    for where in (["--index-dir", str(local)], ["--store", url]):
        done = run_cli("build", str(root / "docs"), "--model", str(fake_model), *where)
        assert done.exit_code == 0, done.stderr
    mine, theirs = answers(open_index(local), "text"), qdrant_answers(url)
    assert any(hit[0] == "doc-9.pdf" for hits in mine for hit in hits)
    assert [hits[:1] and hits[0][:2] for hits in theirs] == [hits[:1] and hits[0][:2] for hits in mine]
    # the pages shown by the first build kept that generation's avgdl (docs/qdrant.md): --rebuild renormalises
    done = run_cli("build", str(root / "docs"), "--model", str(fake_model), "--store", url, "--rebuild")
    assert done.exit_code == 0, done.stderr
    assert_same_answers(qdrant_answers(url), mine, rel=1e-5)


def sparse_state(url: str, *candidates: float) -> dict:
    """HEAD's reference avgdl, the generation's exact mean, and which of them (or of `candidates`) each
    visible page's sparse vector was weighted with (recomputed from its text; None: none of them)."""
    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant.catalog import read_head
    from localgpt_index.index.qdrant.ids import visible_filter
    from localgpt_index.index.qdrant.sparse import HEAD_KEY, SPARSE, avgdl_of, page_vector
    from localgpt_index.query.search import open_index

    store = open_store(url)
    try:
        manifest = store.open()
        head = read_head(store, store.physical())
        lexical = open_index(store=store).view.artifact("lexical")
        points, _ = store.client.scroll(store.physical(), scroll_filter=visible_filter(manifest.generation), limit=500,
                                        with_vectors=[SPARSE], with_payload=["path", "page"])
        weighted = {}
        for point in points:
            text = lexical.page_text(point.payload["path"], point.payload["page"])
            if not text:
                continue
            vector, language = point.vector[SPARSE], lexical.language(point.payload["path"])
            found = [avgdl for avgdl in {head.get(HEAD_KEY) or 0.0, avgdl_of(manifest), *candidates}
                     if avgdl and page_vector(text, avgdl, language)[1] == pytest.approx(vector.values, rel=1e-6)]
            weighted[(point.payload["path"].rsplit("/", 1)[-1], point.payload["page"])] = found[0] if found else None
        return {"reference": head.get(HEAD_KEY), "exact": avgdl_of(manifest), "weighted": weighted}
    finally:
        store.close()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_reference_avgdl_bounds_the_drift_and_a_large_one_renormalises_every_vector(both, fake_model, tmp_path):
    """Every visible page's sparse vector is weighted with HEAD's reference avgdl. A small change of the
    mean (under 1 %) keeps it: scores within the drift of the local engine's, the same top-10. A large
    one (a short document added or removed) rewrites every vector with the exact mean: scores equal the
    local engine's again. A kill after HEAD, before the rewrite, leaves HEAD with no reference, and the
    next commit rewrites them all."""
    from conftest import copy_tree, run_process

    from localgpt_index.index.qdrant.sparse import AVGDL_TOLERANCE
    from localgpt_index.query.search import open_index

    root = tmp_path / "copy"
    copy_tree(both["root"], root)
    local, url, docs = root / "local", f"qdrant+path://{root / 'qd'}/pages", root / "docs"

    def build_both(*remove: str) -> None:
        for where in (["--index-dir", str(local)], ["--store", url]):
            done = run_cli("remove", *remove, *where) if remove else run_cli("build", str(docs), "--model", str(fake_model), *where)
            assert done.exit_code == 0, done.stderr

    def compare(rel: float):
        assert_same_answers(qdrant_answers(url), answers(open_index(local), "text"), rel=rel)

    first = sparse_state(url)
    assert first["reference"] == pytest.approx(first["exact"]) and set(first["weighted"].values()) == {first["reference"]}
    # a page as long as the mean: the mean moves under 1 %, the reference stays, no vector is rewritten
    pages = corpus_pages()
    lengths = {(name, page): len(text.split()) for name, texts in pages.items() for page, text in enumerate(texts)}
    mean = sum(lengths.values()) / len(lengths)
    name, page = min(lengths, key=lambda key: abs(lengths[key] - mean))
    make_pdf(docs / "doc-near.pdf", [pages[name][page]])
    build_both()
    near = sparse_state(url)
    drift = abs(near["reference"] / near["exact"] - 1)
    assert near["reference"] == first["reference"] and 0 < drift <= AVGDL_TOLERANCE, near
    assert set(near["weighted"].values()) == {first["reference"]}  # doc-near's page too
    compare(rel=drift / (1 - drift))
    # a short document (about half the mean): killed once HEAD moved, before the rewrite: HEAD records no reference
    make_pdf(docs / "doc-short.pdf", ["ledger", "freight"])
    killed = run_process("build", str(docs), "--model", str(fake_model), "--store", url, env={"LGPT_FAILPOINT": "after-head"})
    assert killed.returncode == -9, killed.stderr
    done = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(local))
    assert done.exit_code == 0, done.stderr
    dirty = sparse_state(url, first["reference"])
    assert dirty["reference"] is None and abs(first["reference"] / dirty["exact"] - 1) > AVGDL_TOLERANCE, dirty
    assert set(dirty["weighted"].values()) == {first["reference"]}  # its pages were written with the old reference
    # the next commit (the short document removed) rewrites every vector with the exact mean
    build_both(str(docs / "doc-short.pdf"))
    removed = sparse_state(url)
    assert removed["reference"] == pytest.approx(removed["exact"]) and set(removed["weighted"].values()) == {removed["reference"]}
    compare(rel=1e-6)
    # added again in one commit: the mean drifts over the tolerance, the commit renormalises after HEAD
    build_both()
    added = sparse_state(url)
    assert abs(removed["reference"] / added["exact"] - 1) > AVGDL_TOLERANCE
    assert added["reference"] == pytest.approx(added["exact"]) and set(added["weighted"].values()) == {added["reference"]}
    assert len(added["weighted"]) == len(first["weighted"]) + 3  # doc-near's page and doc-short's two
    compare(rel=1e-6)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_reader_on_another_machine_gets_snippets_and_text_from_the_store_alone(fake_model, tmp_path):
    """The Qdrant store is self-contained: the text index and the page text are blobs of its catalog
    collection, so a reader with none of the builder's files (its documents, its folders, its home)
    gets snippets and --with-text from Qdrant alone."""
    import json
    import shutil

    from conftest import run_process

    builder = tmp_path / "builder"
    make_corpus(builder / "docs")
    make_pdf(builder / "docs" / "paid.pdf", ["budget review", "invoice INV-2024-0042 paid by ACME"])
    built = run_cli("build", str(builder / "docs"), "--model", str(fake_model), "--store", f"qdrant+path://{builder / 'qd'}/pages")
    assert built.exit_code == 0, built.stderr
    reader = tmp_path / "reader"
    shutil.copytree(builder / "qd", reader / "qd")  # what a Qdrant server holds; nothing else of the builder's
    shutil.rmtree(builder)
    (reader / "home").mkdir()
    done = run_process("query", "who paid invoice INV-2024-0042?", "--mode", "text", "--with-text", "--json", "-k", "3",
                       "--store", f"qdrant+path://{reader / 'qd'}/pages", cwd=str(reader),
                       env={"HOME": str(reader / "home"), "XDG_CACHE_HOME": str(reader / "home" / ".cache")})
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)["queries"][0]["results"]
    assert (hits[0]["path"].rsplit("/", 1)[-1], hits[0]["page"]) == ("paid.pdf", 2)
    assert "INV-2024-0042" in hits[0]["text"] and "**" in hits[0]["snippet"], hits[0]
