"""`build --text never`: pixels only. No text layer read (no pdftotext), no OCR, no text part beside the
vectors and no text index, so the index answers as one without page text does (`status` counts its
pages as without stored text, queries are visual, --mode text says the index holds no page text).
The build's like-for-like comparison with an index format from before page text (scripts/bench_build.py)
rests on it. Fast tier: the fake encoder, real poppler."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import run_cli
from docgen import make_pdf
from helpers import build_json, make_pdfs, verify_ok


def _pdftotext_log(tmp_path: Path, monkeypatch) -> Path:
    """A `pdftotext` first on PATH that logs each start, then runs poppler's."""
    folder, log = tmp_path / "bin", tmp_path / "pdftotext.log"
    folder.mkdir()
    (folder / "pdftotext").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /usr/bin/pdftotext "$@"\n')
    (folder / "pdftotext").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return log


def _generation(index: Path):
    from localgpt_index.index.open import open_store

    store = open_store(index_dir=index)
    try:
        return store.open_view().manifest
    finally:
        store.close()


def _query(index: Path, *args: str):
    return run_cli("query", "report one", "--index-dir", str(index), "--json", *args)


def test_text_never_reads_no_text_and_the_index_answers_as_one_without_page_text(tmp_path, monkeypatch, fake_model, appended):
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 3)
    log = _pdftotext_log(tmp_path, monkeypatch)
    index = tmp_path / "pixels"
    result, report = build_json(docs, index, "--model", str(fake_model), "--text", "never")
    assert result.exit_code == 0, result.stderr
    assert report["pages_embedded"] == 6
    assert report["text"] == {"layer": 0, "ocr": 0, "none": 0, "unread": 0} and report["page_warnings"] == []
    assert not log.exists()  # no pdftotext started
    assert [extra for _, _, extra in appended] == [{}] * 6  # no text handed to the writer
    manifest = _generation(index)
    assert "lexical" not in manifest.artifacts
    assert all("text" not in seg.parts and "codes" in seg.parts for seg in manifest.segments.values())
    verify_ok(index)

    status = json.loads(run_cli("status", "--index-dir", str(index), "--json").stdout)
    assert status["text"] == {"layer": 0, "ocr": 0, "none": 0, "pending": 0, "unknown": 6}
    visual = _query(index)
    assert visual.exit_code == 0, visual.stderr
    assert json.loads(visual.stdout)["mode"] == "visual"  # the default where the index holds no text
    text = _query(index, "--mode", "text")
    assert text.exit_code != 0 and "holds no page text" in text.stderr, text.stderr

    # the same documents with the default (--text auto): text read (one pdftotext a document), kept and indexed
    result, report = build_json(docs, tmp_path / "full", "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    assert report["text"]["layer"] == 6 and len(log.read_text().splitlines()) == 2
    manifest = _generation(tmp_path / "full")
    assert "lexical" in manifest.artifacts and all("text" in seg.parts for seg in manifest.segments.values())
    assert json.loads(_query(tmp_path / "full").stdout)["mode"] == "hybrid"

    # the text query's refusal says what gives the pixels-only index its text, and that does
    assert "build DOCS --rebuild --text auto" in text.stderr, text.stderr
    rebuilt = run_cli("build", str(docs), "--index-dir", str(index), "--rebuild", "--text", "auto")
    assert rebuilt.exit_code == 0, rebuilt.stderr
    answered = _query(index, "--mode", "text")
    assert answered.exit_code == 0 and json.loads(answered.stdout)["queries"][0]["results"], answered.stderr


def test_text_never_with_ocr_auto_or_always_is_a_usage_error_before_any_work(tmp_path, fake_model, monkeypatch):
    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 1)
    index = tmp_path / "idx"
    for ocr in ("auto", "always"):
        result = run_cli("build", str(docs), "--index-dir", str(index), "--model", str(fake_model), "--text", "never", "--ocr", ocr)
        assert result.exit_code == 2, result.stderr
        assert f"--text never --ocr {ocr}: OCR reads page text, which --text never does not keep" in result.stderr
        assert not index.exists()
    result, report = build_json(docs, index, "--model", str(fake_model), "--text", "never", "--ocr", "never")
    assert result.exit_code == 0, result.stderr
    monkeypatch.setenv("LGPT_OCR", "always")  # a machine's default OCR mode is no contradiction: pixels only, no Tesseract asked
    result, report = build_json(docs, tmp_path / "idx2", "--model", str(fake_model), "--text", "never")
    assert result.exit_code == 0 and report["text"]["ocr"] == 0, result.stderr


def test_text_never_is_recorded_another_text_mode_needs_rebuild_and_a_build_without_it_keeps_it(tmp_path, fake_model):
    """--text is one of the settings an index records (issue 40): on an index with text, --text never is refused
    without --rebuild (the index unchanged); after a --rebuild with it, a build that leaves --text out keeps it."""
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2)
    index = tmp_path / "idx"
    result, _ = build_json(docs, index, "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    make_pdf(docs / "added.pdf", ["An added memo", "Its second page"])
    refused = run_cli("build", str(docs), "--index-dir", str(index), "--text", "never")
    assert refused.exit_code == 1, refused.stderr
    assert "was built with --text auto, not never" in refused.stderr and "--rebuild" in refused.stderr, refused.stderr
    status = json.loads(run_cli("status", "--index-dir", str(index), "--json").stdout)
    assert status["documents"] == 2 and status["text"] == {"layer": 4, "ocr": 0, "none": 0, "pending": 0, "unknown": 0}

    result, report = build_json(docs, index, "--text", "never", "--rebuild")
    assert result.exit_code == 0 and report["indexed"] == 3, result.stderr
    make_pdf(docs / "later.pdf", ["A later memo"])
    result, report = build_json(docs, index)
    assert result.exit_code == 0 and report["indexed"] == 1 and report["text"]["layer"] == 0, result.stderr
    status = json.loads(run_cli("status", "--index-dir", str(index), "--json").stdout)
    assert status["text"] == {"layer": 0, "ocr": 0, "none": 0, "pending": 0, "unknown": 7} and status["settings"]["text"] == "never"
    verify_ok(index)


def test_text_never_on_a_qdrant_collection_answers_visual_only(tmp_path, fake_model):
    from localgpt_index.index.open import open_store

    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2)
    url = f"qdrant+path://{tmp_path / 'qd'}/pixels"
    result = run_cli("build", str(docs), "--model", str(fake_model), "--store", url, "--text", "never", "--json")
    assert result.exit_code == 0, result.stderr
    store = open_store(url)
    try:
        manifest = store.open_view().manifest
    finally:
        store.close()
    assert "lexical" not in manifest.artifacts and all("text" not in seg.parts for seg in manifest.segments.values())
    answer = run_cli("query", "report one", "--store", url, "--json")
    assert answer.exit_code == 0 and json.loads(answer.stdout)["mode"] == "visual", answer.stderr
    text = run_cli("query", "report one", "--store", url, "--json", "--mode", "text")
    assert text.exit_code != 0 and "holds no page text" in text.stderr, text.stderr
