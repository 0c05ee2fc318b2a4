"""Page text from the PDF's own text layer (poppler's pdftotext, one process per document), and how
it reaches the store writer beside each page's vectors. Fast tier: real poppler; OCR is off here
(conftest sets LGPT_OCR=never) but where a test is about Tesseract's absence (OCR itself: test_ocr.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_cli, validate
from docgen import make_pdf, make_png
from helpers import build_json, make_pdfs, marked_processes

from localgpt_index.core.errors import DocumentError


def _blank_page_pdf(path: Path) -> Path:
    """Three pages: words, nothing at all, other words."""
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), invariant=1)
    c.drawString(72, 700, "alpha bravo charlie")
    c.showPage()
    c.showPage()
    c.drawString(72, 700, "delta echo foxtrot")
    c.showPage()
    c.save()
    return path


def _tool_log(tmp_path: Path, monkeypatch, tool: str, body: str = 'exec /usr/bin/{tool} "$@"') -> Path:
    """`tool` first on PATH: a wrapper that logs each start, then runs `body`."""
    folder, log = tmp_path / "bin", tmp_path / f"{tool}.log"
    folder.mkdir(exist_ok=True)
    (folder / tool).write_text(f'#!/bin/sh\necho "$@" >> {log}\n' + body.format(tool=tool) + "\n")
    (folder / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return log


def test_every_page_gets_its_own_text_and_a_blank_page_none(tmp_path):
    from localgpt_index.ingest.text import pdf_page_texts

    pdf = _blank_page_pdf(tmp_path / "three.pdf")
    texts = [text for text, _ in pdf_page_texts(pdf, 1, 3)]
    assert texts == ["alpha bravo charlie", "", "delta echo foxtrot"]
    assert [text for text, _ in pdf_page_texts(pdf, 2, 3)] == ["", "delta echo foxtrot"]  # a resumed document: its remaining pages


def test_a_build_reads_each_document_with_one_pdftotext_and_hands_each_page_its_text(tmp_path, monkeypatch, fake_model, appended):
    docs = tmp_path / "docs"
    make_pdfs(docs, 3, 4)
    log = _tool_log(tmp_path, monkeypatch, "pdftotext")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    assert len(log.read_text().splitlines()) == 3  # one process per document, not per page
    validate(report, "build")
    assert report["text"] == {"layer": 12, "ocr": 0, "none": 0, "unread": 0} and report["page_warnings"] == []
    assert len(appended) == 12
    for name, page, extra in appended:
        n = name.removeprefix("report-").removesuffix(".pdf")
        assert extra["text_source"] == "layer"
        assert extra["text"].startswith(f"report {n} page {page - 1}\n")  # make_pdfs numbers pages from 0
        assert f"Page {page}, line 20: report {n} page {page - 1} details" in extra["text"]


def test_pages_without_a_text_layer_get_none_when_ocr_is_off(tmp_path, fake_model, appended):
    docs = tmp_path / "docs"
    make_png(docs / "scan.png", "Invoice 42", size=(300, 200))
    _blank_page_pdf(docs / "three.pdf")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "never")
    assert result.exit_code == 0, result.stderr
    assert report["text"] == {"layer": 2, "ocr": 0, "none": 2, "unread": 0}
    assert "Tesseract" not in result.stderr  # never asked for: nothing to warn about
    assert sorted((name, page, extra["text_source"]) for name, page, extra in appended) == [
        ("scan.png", 1, "none"), ("three.pdf", 1, "layer"), ("three.pdf", 2, "none"), ("three.pdf", 3, "layer")]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_stuck_pdftotext_is_stopped_and_its_document_indexed_without_text(tmp_path, monkeypatch, fake_model, process_mark):
    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 2)
    _tool_log(tmp_path, monkeypatch, "pdftotext", "exec sleep 120")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--render-timeout", "2")
    assert result.exit_code == 0, result.stderr
    assert report["indexed"] == 1 and report["pages_total"] == 2
    assert report["text"] == {"layer": 0, "ocr": 0, "none": 2, "unread": 0}
    [warning] = report["page_warnings"]
    assert (Path(warning["path"]).name, warning["page"], warning["stage"]) == ("report-0.pdf", None, "text")
    assert "pdftotext did not finish within 2 s" in warning["reason"]
    assert "report-0.pdf: its text layer could not be read" in result.stderr
    assert marked_processes(process_mark, "sleep 120") == []  # killed with its process group, not left behind


def test_no_pdftotext_is_said_once_and_the_documents_are_indexed(tmp_path, fake_model):
    docs = tmp_path / "docs"
    make_pdfs(docs, 3, 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("pdftoppm", "pdfinfo"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    result = run_cli("build", str(docs), "--index-dir", str(tmp_path / "idx"), "--model", str(fake_model), "--json",
                     env={"PATH": str(bin_dir)})
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 3 and report["text"]["none"] == 3
    assert result.stderr.count("pdftotext is not installed") == 1, result.stderr


def test_no_tesseract_builds_visual_only_with_one_warning(tmp_path, fake_model, appended):
    docs = tmp_path / "docs"
    for n in range(3):
        make_png(docs / f"scan-{n}.png", f"scan {n}", size=(200, 150))
    make_pdf(docs / "text.pdf", ["A page with a text layer", "And another"])
    bin_dir = tmp_path / "bin"  # poppler, no Tesseract
    bin_dir.mkdir()
    for tool in ("pdftoppm", "pdfinfo", "pdftotext"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    result = run_cli("build", str(docs), "--index-dir", str(tmp_path / "idx"), "--model", str(fake_model), "--json",
                     "--ocr", "auto", env={"PATH": str(bin_dir)})
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 4 and report["pages_total"] == 5
    assert report["text"] == {"layer": 2, "ocr": 0, "none": 3, "unread": 3}
    assert result.stderr.count("Tesseract is not installed") == 1, result.stderr
    assert "apt-get install tesseract-ocr tesseract-ocr-eng" in result.stderr and "doctor" in result.stderr
    assert report["page_warnings"] == []  # the one warning says it all, not one a page
    assert sorted(extra["text_source"] for _, _, extra in appended) == ["layer", "layer", "none", "none", "none"]


def test_ocr_always_without_tesseract_or_a_language_tesseract_lacks_is_exit_4_before_any_work(tmp_path, fake_model):
    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("pdftoppm", "pdfinfo", "pdftotext"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    index = tmp_path / "idx"
    result = run_cli("build", str(docs), "--index-dir", str(index), "--model", str(fake_model), "--ocr", "always",
                     env={"PATH": str(bin_dir)})
    assert result.exit_code == 4 and "--ocr always: Tesseract is not installed" in result.stderr, result.stderr
    assert "apt-get install tesseract-ocr" in result.stderr and not index.exists()

    result = run_cli("build", str(docs), "--index-dir", str(index), "--model", str(fake_model), "--ocr", "auto",
                     "--ocr-lang", "eng+klingon")
    assert result.exit_code == 4, result.stderr
    assert "--ocr-lang eng+klingon: Tesseract has no language klingon (it has: eng)" in result.stderr
    assert "apt-get install tesseract-ocr-klingon" in result.stderr and not index.exists()


def test_a_bad_lgpt_ocr_is_a_usage_error(tmp_path, fake_model, monkeypatch):
    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 1)
    monkeypatch.setenv("LGPT_OCR", "sometimes")
    result = run_cli("build", str(docs), "--index-dir", str(tmp_path / "idx"), "--model", str(fake_model))
    assert result.exit_code == 2 and "LGPT_OCR=sometimes: expected one of auto, always, never" in result.stderr


def test_a_damaged_pdf_text_layer_is_a_document_error_for_the_caller(tmp_path):
    from localgpt_index.ingest.text import pdf_page_texts

    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    with pytest.raises(DocumentError) as raised:
        pdf_page_texts(bad, 1, 1, timeout_s=10)
    assert raised.value.reason.startswith("poppler failed on its text layer: Syntax Error"), raised.value.reason


def test_page_text_is_cleaned_and_bounded():
    from localgpt_index.ingest.text import MAX_PAGE_CHARS, clean_page_text, has_text_layer

    assert clean_page_text("  a\x00b \r\nc  \n\n") == "a b\nc"
    assert len(clean_page_text("x" * (MAX_PAGE_CHARS + 10))) == MAX_PAGE_CHARS
    assert not has_text_layer("Scanned with CamScanner  3") and has_text_layer("word " * 10)


@pytest.fixture
def toy(monkeypatch):
    """The artifact plumbing's toy artifact (tests/toy_artifact.py: it keeps each page's extra["text"]
    in a part of its segment), registered here and in every CLI process this test starts."""
    import toy_artifact

    from localgpt_index.core.plugins import plugin_manager

    plugin_manager().register(toy_artifact)  # before LGPT_PLUGINS names it: this process has loaded its plugins
    monkeypatch.setenv("LGPT_PLUGINS", f"{os.environ.get('LGPT_PLUGINS', '')},toy_artifact")
    yield toy_artifact
    plugin_manager().unregister(toy_artifact)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("kind", ["local", "qdrant"])
def test_page_text_lands_in_the_generation_beside_the_vectors(kind, toy, tmp_path, fake_model):
    """Through the real transaction core: each page's text is in its segment's part, row by row, in
    the generation HEAD names (the toy artifact stands in for the text artifact of issue 27)."""
    from localgpt_index.index.open import open_store

    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 3)
    where = ["--index-dir", str(tmp_path / "idx")] if kind == "local" else ["--store", f"qdrant+path://{tmp_path / 'qd'}/notes"]
    result = run_cli("build", str(docs), "--model", str(fake_model), *where)
    assert result.exit_code == 0, result.stderr
    store = open_store(index_dir=tmp_path / "idx") if kind == "local" else open_store(f"qdrant+path://{tmp_path / 'qd'}/notes")
    try:
        view = store.open_view()
        parts = view.artifact("toy")["parts"]
        for doc in view.manifest.documents:
            n = Path(doc.path).stem.removeprefix("report-")
            texts = [parts[span.segment]["texts"][row] for span in doc.spans for row in range(span.first, span.first + span.pages)]
            assert [text.split("\n")[0] for text in texts] == [f"report {n} page {p}" for p in range(3)]
    finally:
        store.close()


def test_a_resumed_document_reads_the_text_of_its_remaining_pages_only(tmp_path):
    """A long document committed in part carries on from its first page not yet indexed: its texts too."""
    from localgpt_index.ingest.events import DocumentOpened, OpenedDocument, PagesEncoded
    from localgpt_index.ingest.opening import FeedSource
    from localgpt_index.ingest.pagetext import PageTexts, TextSettings

    pdf = make_pdf(tmp_path / "long.pdf", [f"chapter {n}" for n in range(1, 6)])
    texts = PageTexts(TextSettings(ocr="never"), [FeedSource(pdf, "pdf", pdf.stat().st_size, first_page=4)])
    events = list(texts.attach(iter([DocumentOpened(0, OpenedDocument(pdf=pdf, pages=5)),
                                     PagesEncoded(((0, "vectors"), (0, "vectors")))])))
    assert [text.text.split("\n")[0] for text in events[1].texts] == ["chapter 4", "chapter 5"]
    assert texts.tally.layer == 2


@pytest.mark.slow
def test_office_documents_get_the_text_layer_of_their_conversion(corpus, tmp_path, fake_model, appended):
    """Office, HTML and Markdown files are converted to PDF (LibreOffice): their text is that PDF's layer."""
    from conftest import copy_tree

    root, _ = corpus
    docs = copy_tree(root, tmp_path / "docs")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "never")
    assert result.exit_code == 0, result.stderr
    read: dict[str, list[str]] = {}
    for name, page, extra in sorted(appended, key=lambda item: (item[0], item[1])):
        read.setdefault(name, []).append(extra["text"] if extra["text_source"] == "layer" else "")
    assert "Q3 revenue grew 12 percent." in " ".join(read["memo.docx"])
    assert [page.split("\n")[0] for page in read["deck.pptx"]] == ["Market overview", "Customers", "Next steps"]
    assert "Q3" in read["revenue.xlsx"][0] and "134" in read["revenue.xlsx"][0]
    assert "Meeting notes" in read["readme.md"][0] and "hiring plan" in read["readme.md"][0]
    assert read["receipt.png"] == [""]



def test_a_pdf_costs_one_pdfinfo_whose_page_sizes_tell_the_text_layer_its_turned_pages(tmp_path, monkeypatch, fake_model, appended):
    """Every process start costs milliseconds of CPU beside the model: a document's one pdfinfo (at its opening) reads
    every page's size and turn, and its text layer takes which pages are turned from it where a page's few words fit
    the page either way (as here: pdf_page_texts alone has to ask pdfinfo), with the same words' boxes."""
    import numpy as np
    from reportlab.pdfgen import canvas

    from localgpt_index.ingest.text import pdf_page_texts

    pdf = tmp_path / "docs" / "turned.pdf"
    pdf.parent.mkdir()
    c = canvas.Canvas(str(pdf), invariant=1)
    for rotation, x, y in ((0, 20, 400), (90, 72, 100), (0, 72, 100)):  # words that fit the page upright or turned
        c.setPageSize((612, 792))
        c.setPageRotation(rotation)
        c.drawString(x, y, f"turned {rotation} words")
        c.showPage()
    c.save()
    log = _tool_log(tmp_path, monkeypatch, "pdfinfo")
    alone = pdf_page_texts(pdf, 1, 3)
    assert len(log.read_text().splitlines()) == 1  # the words alone could not tell

    result = run_cli("build", str(pdf.parent), "--index-dir", str(tmp_path / "idx"), "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    assert len(log.read_text().splitlines()) == 2  # the build's one
    built = {page: extra for _, page, extra in appended}
    assert [built[page]["text"] for page in (1, 2, 3)] == [text for text, _ in alone] == [
        "turned 0 words", "turned 90 words", "turned 0 words"]
    for page, (_, words) in enumerate(alone, 1):
        assert words is not None and np.array_equal(built[page]["words"].boxes, words.boxes), page
    assert not np.array_equal(alone[0][1].boxes, alone[1][1].boxes)  # the turned page's boxes are its own
