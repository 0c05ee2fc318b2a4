"""`query --mode hybrid|visual|text` end to end through the CLI, the server and the Python API."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli, validate
from helpers import report_index as build_report_index


@pytest.fixture(scope="module")
def visual_only(fake_model, tmp_path_factory):
    """An index whose generation holds no page text: pictures, read with OCR off."""
    from docgen import make_png

    work = tmp_path_factory.mktemp("visual")
    for name in ("quarterly", "report", "scan"):
        make_png(work / "docs" / f"{name}.png", f"a {name} picture")
    index = work / "idx"
    assert run_cli("build", str(work / "docs"), "--model", str(fake_model), "--index-dir", str(index), "--ocr", "never").exit_code == 0
    return {"docs": work / "docs", "index": index}


def test_an_index_of_pictures_without_ocr_answers_visual_and_text_modes_with_what_it_has(visual_only):
    """Its text index holds no page: visual by default; text finds nothing and says why; hybrid is the
    visual list (text modes were refused as if the index could hold no text, "rebuild to add it")."""
    index = ["--index-dir", str(visual_only["index"])]
    answered = run_cli("query", "quarterly report", "--json", *index)
    assert answered.exit_code == 0, answered.stderr
    document = json.loads(answered.stdout)
    validate(document, "query")
    assert document["mode"] == "visual" and "fusion" not in document
    assert all("snippet" not in hit and "text_rank" not in hit for hit in document["queries"][0]["results"])
    text = run_cli("query", "quarterly report", "--mode", "text", "--json", *index)
    assert text.exit_code == 0 and json.loads(text.stdout)["queries"][0]["results"] == [], text.stderr
    assert "no page of this index has text" in text.stderr
    hybrid = run_cli("query", "quarterly report", "--mode", "hybrid", "--json", *index)
    assert hybrid.exit_code == 0, hybrid.stderr
    assert [hit["path"] for hit in json.loads(hybrid.stdout)["queries"][0]["results"]] == \
        [hit["path"] for hit in document["queries"][0]["results"]]
    bad = run_cli("query", "x", "--mode", "lexical", *index)
    assert bad.exit_code == 2 and "lexical" in bad.stderr


def test_an_index_built_with_text_never_refuses_text_modes(fake_model, tmp_path):
    from docgen import make_pdf

    make_pdf(tmp_path / "docs" / "a.pdf", ["quarterly report"])
    index = ["--index-dir", str(tmp_path / "idx")]
    assert run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), "--text", "never", *index).exit_code == 0
    for mode in ("text", "hybrid"):
        refused = run_cli("query", "quarterly report", "--mode", mode, *index)
        assert refused.exit_code == 1
        assert f"holds no page text, so --mode {mode} cannot answer" in refused.stderr
        assert "--mode visual" in refused.stderr and "Traceback" not in refused.stderr


def give_page_text(index_dir, texts: dict[tuple[str, int], str], store=None) -> None:
    """Commit a generation of the same documents whose pages carry text, fed through the writers'
    `extra` as the build's text extraction feeds it ({"text", "text_source"}): a test-side writer."""
    from localgpt_index.core.types import PageRef
    from localgpt_index.index.format.manifest import Span
    from localgpt_index.index.local.store import LocalStore

    store = store if store is not None else LocalStore(index_dir / "default")
    view = store.open_view()
    manifest = view.manifest
    with store.begin() as txn:
        writer = txn.segment_writer(manifest.settings.dim)
        documents, row = [], 0
        for doc in manifest.documents:
            name = doc.path.rsplit("/", 1)[-1]
            for page, vectors in enumerate(view.page_vectors(doc), 1):
                text = texts.get((name, page), "")
                writer.append(vectors, PageRef(doc.path, page, doc.sha256, doc.kind, dict(doc.metadata)),
                              {"text": text, "text_source": "layer" if text else "none"})
            documents.append((doc, row))
            row += doc.pages
        segment = txn.finish_segment(writer)
        moved = [doc.model_copy(update={"spans": [Span(segment=segment.id, first=first, pages=doc.pages)]}) for doc, first in documents]
        txn.commit(moved, manifest.model, manifest.settings)


FILLER = "quarterly figures for the board and the usual appendix about travel costs and budgets"
FACT = "The invoice INV-2024-0042 was paid by ACME Logistics on 3 March."


@pytest.fixture(scope="module")
def with_text(fake_model, tmp_path_factory):
    built = build_report_index(tmp_path_factory.mktemp("hybrid"), fake_model, reports=4, pages=2)
    texts = {(f"report-{i}.pdf", page): f"report {i} page {page} {FILLER}" for i in range(4) for page in (1, 2)}
    texts[("report-1.pdf", 2)] += " " + FACT
    texts[("report-3.pdf", 1)] += " zanzibar"
    give_page_text(built["index"], texts)
    return {**built, "texts": texts}


def query_json(index_dir, *args):
    done = run_cli("query", *args, "--json", "--index-dir", str(index_dir))
    assert done.exit_code == 0, done.stderr
    document = json.loads(done.stdout)
    validate(document, "query")
    return document


def test_hybrid_is_the_default_with_text_and_finds_the_fact(with_text):
    document = query_json(with_text["index"], "who paid invoice INV-2024-0042?")
    assert document["mode"] == "hybrid" and document["fusion"] == "weighted"
    top = document["queries"][0]["results"][0]
    assert (top["path"].rsplit("/", 1)[1], top["page"]) == ("report-1.pdf", 2)
    assert top["text_rank"] == 1 and "visual_rank" in top and "visual_score" in top and top["text_score"] > 0
    assert "**INV-2024-0042**" in top["snippet"] and "**paid**" in top["snippet"]
    assert "text" not in top
    scan = [hit for hit in document["queries"][0]["results"] if hit["path"].endswith("scan.png")]
    assert all(hit["text_rank"] is None and "snippet" not in hit for hit in scan)  # a page without text


def test_text_mode_with_text_filters_and_rrf(with_text):
    index = with_text["index"]
    text = query_json(index, "INV-2024-0042", "--mode", "text", "--with-text")
    assert document_pages(text) == [("report-1.pdf", 2)]  # only that page holds the code
    assert text["queries"][0]["results"][0]["text"] == with_text["texts"][("report-1.pdf", 2)]
    assert "visual_rank" not in text["queries"][0]["results"][0]
    # filters apply to both lists: report-1 is not team=finance
    filtered = query_json(index, "who paid invoice INV-2024-0042?", "--filter", "team=finance")
    assert {name for name, _ in document_pages(filtered)} == {"report-0.pdf"}
    rrf = query_json(index, "who paid invoice INV-2024-0042?", "--fusion", "rrf", "--rrf-k", "10", "-k", "3")
    assert rrf["fusion"] == "rrf" and len(rrf["queries"][0]["results"]) == 3
    best = rrf["queries"][0]["results"][0]
    assert best["score"] == pytest.approx(sum(1 / (10 + rank) for rank in (best["text_rank"], best["visual_rank"]) if rank))
    table = run_cli("query", "INV-2024-0042", "--mode", "text", "--index-dir", str(index))
    assert table.exit_code == 0 and "INV-2024-0042" in table.stdout


def within_rounding(document):
    """`document` with every float compared within float32 rounding: the two exact scorers (torch's path and
    the compiled kernel) sum in another order (index/scoring/kernel_policy.py)."""
    if isinstance(document, float):
        return pytest.approx(document, rel=1e-5, abs=1e-6)
    if isinstance(document, dict):
        return {key: within_rounding(value) for key, value in document.items()}
    if isinstance(document, list):
        return [within_rounding(value) for value in document]
    return document


def document_pages(document) -> list[tuple[str, int]]:
    return [(hit["path"].rsplit("/", 1)[1], hit["page"]) for hit in document["queries"][0]["results"]]


def test_verify_checks_the_text_and_a_removed_document_leaves_it(with_text, tmp_path):
    from conftest import copy_tree
    from helpers import verify_ok

    index = copy_tree(with_text["index"], tmp_path / "idx")
    verify_ok(index)
    assert document_pages(query_json(index, "zanzibar", "--mode", "text")) == [("report-3.pdf", 1)]
    removed = run_cli("remove", str(with_text["docs"] / "report-3.pdf"), "--index-dir", str(index))
    assert removed.exit_code == 0, removed.stderr
    assert query_json(index, "zanzibar", "--mode", "text")["queries"][0]["results"] == []
    assert document_pages(query_json(index, "INV-2024-0042", "--mode", "text")) == [("report-1.pdf", 2)]
    verify_ok(index)
    # damage the text index's blob: verify names it
    from localgpt_index.index.local.store import LocalStore

    named = LocalStore(index / "default").open_view().manifest.artifacts["lexical"].blobs[0].name
    blob = index / "default" / "artifacts" / named
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes()[:-100] + b"x" * 100)
    damaged = run_cli("verify", "--index-dir", str(index), "--json")
    assert damaged.exit_code != 0 and "lexical" in damaged.stdout


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_server_and_query_server_answer_the_same(with_text):
    from served import Server

    running = Server("--index-dir", str(with_text["index"]), "--absolute-paths")
    try:
        running.wait_ready()
        with running.client() as client:
            served = client.post("/query", json={"queries": ["who paid invoice INV-2024-0042?"], "k": 4, "with_text": True}).json()
            text = client.post("/query", json={"queries": ["INV-2024-0042"], "mode": "text"}).json()
        cli = query_json(with_text["index"], "who paid invoice INV-2024-0042?", "-k", "4", "--with-text")
        assert served == within_rounding(cli)  # serve scores with the compiled kernel once it is loaded, a one-shot CLI with torch
        assert document_pages(text) == [("report-1.pdf", 2)]
        via = run_cli("query", "INV-2024-0042", "--mode", "text", "--json", "--server", running.url)
        assert via.exit_code == 0, via.stderr
        assert json.loads(via.stdout)["queries"][0]["results"] == text["queries"][0]["results"]
    finally:
        assert running.stop() == 0


def text_generation(index_dir) -> tuple[int, set[str], set[str]]:
    """(generation, its documents, the documents its text index holds)."""
    from localgpt_index.index.local.store import LocalStore

    view = LocalStore(index_dir / "default").open_view()
    lexical = view.artifact("lexical")
    return view.manifest.generation, {doc.path for doc in view.manifest.documents}, lexical.paths()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("point", ["before-head", "after-head"])
def test_kill_during_a_remove_leaves_text_and_vectors_of_one_generation(with_text, tmp_path, point):
    from conftest import copy_tree, run_process
    from helpers import verify_ok

    index = copy_tree(with_text["index"], tmp_path / "idx")
    generation, documents, with_texts = text_generation(index)
    killed = run_process("remove", str(with_text["docs"] / "report-3.pdf"), "--index-dir", str(index),
                         env={"LGPT_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    verify_ok(index)
    now, now_documents, now_texts = text_generation(index)
    if point == "before-head":
        assert (now, now_documents, now_texts) == (generation, documents, with_texts)
        assert document_pages(query_json(index, "zanzibar", "--mode", "text")) == [("report-3.pdf", 1)]
    else:
        assert now == generation + 1 and now_texts == with_texts - {str(with_text["docs"] / "report-3.pdf")}
        assert query_json(index, "zanzibar", "--mode", "text")["queries"][0]["results"] == []
    assert now_texts <= now_documents


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_kill_during_a_rebuild_leaves_the_old_text_answering(with_text, fake_model, tmp_path):
    from conftest import copy_tree, run_process
    from helpers import verify_ok

    index = copy_tree(with_text["index"], tmp_path / "idx")
    before = text_generation(index)
    killed = run_process("build", str(with_text["docs"]), "--rebuild", "--model", str(fake_model), "--index-dir", str(index),
                         env={"LGPT_FAILPOINT": "before-head"})
    assert killed.returncode == -9, killed.stderr
    verify_ok(index)
    assert text_generation(index) == before
    assert document_pages(query_json(index, "INV-2024-0042", "--mode", "text")) == [("report-1.pdf", 2)]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_qdrant_store_answers_text_and_hybrid_queries_the_same_way(fake_model, tmp_path):
    """The text index is an artifact of the one transaction core: on Qdrant its blobs live in the
    catalog, and the same engine and fusion answer."""
    from helpers import make_pdfs

    from localgpt_index.index.open import open_store

    docs = tmp_path / "docs"
    make_pdfs(docs, 3, 2)
    url = f"qdrant+path://{tmp_path / 'qd'}/notes"
    built = run_cli("build", str(docs), "--model", str(fake_model), "--store", url)
    assert built.exit_code == 0, built.stderr
    store = open_store(url)
    try:
        give_page_text(None, {("report-1.pdf", 2): FACT, ("report-0.pdf", 1): FILLER}, store=store)
    finally:
        store.close()
    for mode in ("text", "hybrid"):
        done = run_cli("query", "who paid invoice INV-2024-0042?", "--mode", mode, "--json", "--store", url)
        assert done.exit_code == 0, done.stderr
        document = json.loads(done.stdout)
        validate(document, "query")
        assert document_pages(document)[0] == ("report-1.pdf", 2)
    verified = run_cli("verify", "--store", url)
    assert verified.exit_code == 0, verified.stdout + verified.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("point", ["write-vectors", "before-head", "after-head"])
def test_kill_during_a_build_leaves_text_and_vectors_of_one_generation(fake_model, tmp_path, point):
    """A build that reads page text (the text layer, as every build now does), killed at each commit
    step: the text index and the vectors answer the same generation, and verify passes."""
    from conftest import run_process
    from docgen import make_pdf
    from helpers import build_ok, verify_ok

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "old.pdf", ["Zanzibar shipping terms", "Payment within 30 days"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index))
    before = text_generation(index)
    assert before[1] == before[2] and len(before[1]) == 1  # the one document, and its text
    make_pdf(docs / "new.pdf", ["Quokka habitat survey", "Rottnest island", "Appendix"])
    killed = run_process("build", str(docs), "--model", str(fake_model), "--index-dir", str(index),
                         env={"LGPT_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    verify_ok(index)
    generation, documents, texts = text_generation(index)
    assert texts == documents  # never the vectors of one generation with the text of another
    found = document_pages(query_json(index, "quokka habitat", "--mode", "text"))
    if point == "after-head":
        assert generation == before[0] + 1 and found == [("new.pdf", 1)]
    else:
        assert (generation, documents, texts) == before and found == []
    assert document_pages(query_json(index, "zanzibar", "--mode", "text")) == [("old.pdf", 1)]


def one_word_pdf(path, word: str, times: int):
    """A PDF of one US letter page whose text is `word` (two letters), `times` times (up to 10,000: small
    print, where pdftotext still reads every word)."""
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    pdf = canvas.Canvas(str(path), pagesize=(612, 792), invariant=1)
    pdf.setFont("Helvetica", 4)
    for line in range(-(-times // 100)):
        pdf.drawString(20, 772 - 5.5 * line, " ".join([word] * min(100, times - 100 * line)))
    pdf.showPage()
    pdf.save()
    return path


class WorkLimit(Exception):
    """More lines of lgpt-index's own code ran than the budget allowed."""


def lines_run(budget: int, action):
    """`action()` with the lines of lgpt-index's own Python code that run counted (sys.settrace, this thread):
    its result and the count; past `budget`, WorkLimit (a work count, unlike a time, is the same on every machine)."""
    import sys
    from pathlib import Path

    import localgpt_index

    package, count = str(Path(localgpt_index.__file__).parent), [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] > budget:
                raise WorkLimit(f"over {budget:,} lines run")
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename.startswith(package) else None)
    try:
        return action(), count[0]
    finally:
        sys.settrace(None)


def test_a_page_of_one_word_repeated_is_queried_in_linear_work(fake_model, tmp_path):
    """A page whose text is one word 10,000 times: a text query's snippet finds the densest window in work
    linear in the page's matches (about 30 lines of code a match; quadratic, it was 10,000 x 10,000 / 2)."""
    words = 10_000
    one_word_pdf(tmp_path / "docs" / "one-word.pdf", "ab", words)
    index = str(tmp_path / "idx")
    assert run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", index).exit_code == 0
    budget = 100 * words
    answered, lines = lines_run(budget, lambda: run_cli("query", "ab", "--mode", "text", "--with-text", "--json", "--index-dir", index))
    assert lines <= budget, f"over {budget:,} lines of code run for one query: {answered.output[-300:]}"
    hit = json.loads(answered.stdout)["queries"][0]["results"][0]
    assert hit["text"].split() == ["ab"] * words and hit["snippet"].startswith("**ab** **ab**")


def test_a_changed_hit_equals_dataclasses_replace_and_leaves_the_hit_as_it_was():
    """SearchHit.changed, which the query paths use for rank, snippet and regions, is dataclasses.replace without
    __init__: the same hit, a new object, and an unknown field refused as replace refuses it."""
    from dataclasses import replace

    from localgpt_index.core.types import Region, SearchHit

    hit = SearchHit(1, 0.5, "/docs/a.pdf", 2, "0" * 64, "pdf", {"team": "finance"}, snippet="a **b**", text="a b")
    regions = (Region((0.1, 0.2, 0.3, 0.4), "text", 1.5, ("b",), "a b"),)
    changed = hit.changed(rank=3, regions=regions, text=None)
    assert changed == replace(hit, rank=3, regions=regions, text=None) and changed is not hit
    assert (hit.rank, hit.regions, hit.text) == (1, None, "a b")
    expected = {**hit.to_dict(), "rank": 3, "regions": [regions[0].to_dict()]}
    del expected["text"]
    assert changed.to_dict() == expected
    with pytest.raises(TypeError, match="no field 'rnak'"):
        hit.changed(rnak=3)
