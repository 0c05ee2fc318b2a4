"""`status` and `ls` say where the index's page text came from (the text layer, OCR, none), from the
text parts the build stores beside the vectors; `remove` and `--rebuild` keep them true, `verify` checks
them. Fast tier: a stand-in `tesseract` on PATH (real OCR: test_ocr.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import run_cli, validate
from docgen import make_pdf, make_png
from helpers import build_ok, verify_ok

LIST_LANGS = 'if [ "$1" = "--list-langs" ]; then printf \'List of available languages in "/x/" (2):\\neng\\nosd\\n\'; exit 0; fi\n'


def _docs(folder: Path) -> Path:
    make_pdf(folder / "report.pdf", ["Annual report", "Revenue by quarter", "Outlook"])
    make_png(folder / "scan.png", "a scan", size=(200, 150))
    make_png(folder / "photo.png", "a photo", size=(200, 150))
    return folder


def _ocr_reads(tmp_path: Path, monkeypatch, said: str) -> None:
    """A `tesseract` first on PATH that reads every picture as `said` (nothing: a page without text)."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    (folder / "tesseract").write_text("#!/bin/sh\n" + LIST_LANGS + f"echo '{said}'\n")
    (folder / "tesseract").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _status(index: Path) -> dict:
    result = run_cli("status", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "status")
    return document


def _ls(index: Path) -> dict[str, dict]:
    result = run_cli("ls", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "documents")
    return {Path(doc["path"]).name: doc["text"] for doc in document["documents"]}


def test_status_and_ls_count_pages_by_the_source_of_their_text(tmp_path, monkeypatch, fake_model):
    docs, index = _docs(tmp_path / "docs"), tmp_path / "idx"
    _ocr_reads(tmp_path, monkeypatch, "words read by OCR")
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index), "--ocr", "auto")
    assert _status(index)["text"] == {"layer": 3, "ocr": 2, "none": 0, "pending": 0, "unknown": 0}
    assert _ls(index) == {"report.pdf": {"layer": 3, "ocr": 0, "none": 0, "pending": 0, "unknown": 0},
                          "scan.png": {"layer": 0, "ocr": 1, "none": 0, "pending": 0, "unknown": 0},
                          "photo.png": {"layer": 0, "ocr": 1, "none": 0, "pending": 0, "unknown": 0}}
    shown = run_cli("status", "--index-dir", str(index)).stdout
    assert "text        3 pages from their text layer, 2 by OCR, 0 without text" in shown
    listed = run_cli("ls", "--index-dir", str(index), "--format", "table").stdout.splitlines()
    assert listed[0].split() == ["pages", "kind", "text", "path"]
    assert any(line.split()[:3] == ["1", "image", "ocr"] and line.endswith("scan.png") for line in listed)


def test_remove_and_rebuild_keep_the_counts_true_and_verify_checks_them(tmp_path, monkeypatch, fake_model):
    docs, index = _docs(tmp_path / "docs"), tmp_path / "idx"
    _ocr_reads(tmp_path, monkeypatch, "")  # OCR finds nothing: those pages have no text
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index), "--ocr", "auto")
    assert _status(index)["text"] == {"layer": 3, "ocr": 0, "none": 2, "pending": 0, "unknown": 0}

    assert run_cli("remove", str(docs / "scan.png"), "--index-dir", str(index)).exit_code == 0
    assert _status(index)["text"] == {"layer": 3, "ocr": 0, "none": 1, "pending": 0, "unknown": 0}
    verify_ok(index)

    (docs / "scan.png").unlink()
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(index), "--ocr", "never", "--rebuild")
    assert _status(index)["text"] == {"layer": 3, "ocr": 0, "none": 1, "pending": 0, "unknown": 0}
    assert set(_ls(index)) == {"report.pdf", "photo.png"}
    verify_ok(index)
