"""The PDF store both backends share (index/format/pdfstore.py): durable writes, no staged PDF left by
an aborted transaction, unreferenced PDFs collected; in Qdrant's own folder as in a local index,
and in a --pdf-store folder that several collections share only when no collection's record names
them (more in tests/test_qdrant_pdf_store.py).

Black-box: the CLI (in-process, so os.fsync can be watched), the files on disk, `verify`.
"""

from __future__ import annotations

import os
from pathlib import Path

from conftest import run_cli
from docgen import make_png


def _qdrant(tmp_path: Path, collection: str = "notes", pdf_store: Path | None = None) -> list[str]:
    args = ["--store", f"qdrant+path://{tmp_path / 'qd'}/{collection}"]
    return args + (["--pdf-store", str(pdf_store)] if pdf_store else [])


def _build(docs: Path, model: Path, store: list[str], *more: str):
    result = run_cli("build", str(docs), "--model", str(model), *store, *more)
    return result


def _verify_ok(store: list[str]) -> None:
    result = run_cli("verify", *store)
    assert result.exit_code == 0, result.stdout + result.stderr


def _pdfs(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "pdf").iterdir()) if (folder / "pdf").is_dir() else []


def test_the_qdrant_pdf_store_fsyncs_each_pdf_and_its_folder(fake_model, tmp_path, unstable_converter, monkeypatch):
    docs, shared = tmp_path / "docs", tmp_path / "pdfs"
    docs.mkdir()
    (docs / "note.txt").write_text("a converted note")
    synced: list[str] = []
    real_fsync = os.fsync

    def watched(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", watched)
    result = _build(docs, fake_model, _qdrant(tmp_path, pdf_store=shared))
    assert result.exit_code == 0, result.stderr
    [stored] = _pdfs(shared)
    folder = os.path.realpath(shared / "pdf")
    copies = [p for p in synced if os.path.dirname(p) == folder and os.path.basename(p).startswith(".tmp-")]
    assert copies, synced  # the copy, before it is renamed to its name
    assert folder in synced  # the rename
    assert os.path.realpath(shared) in synced  # the new pdf/ folder itself
    assert synced.index(copies[0]) < synced.index(folder)
    assert stored.endswith(".pdf")


def test_an_aborted_qdrant_rebuild_leaves_no_staged_pdf(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("a converted note")
    make_png(docs / "scan.png", "a scan")
    store = _qdrant(tmp_path)
    own = tmp_path / "qd" / "notes-pdf"  # the in-process mode's own PDF folder
    assert _build(docs, fake_model, store).exit_code == 0
    before = _pdfs(own)
    assert len(before) == 1

    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    result = _build(docs, fake_model, store, "--rebuild", "--strict")  # converts again (other bytes), then aborts
    assert result.exit_code == 1, result.stderr
    assert _pdfs(own) == before  # the new conversion's PDF was discarded with the transaction
    _verify_ok(store)


def test_a_removed_documents_pdf_is_collected_from_qdrants_own_pdf_folder(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("a converted note")
    make_png(docs / "scan.png", "a scan")
    store = _qdrant(tmp_path)
    own = tmp_path / "qd" / "notes-pdf"
    assert _build(docs, fake_model, store).exit_code == 0
    [first] = _pdfs(own)

    (docs / "note.txt").write_text("the note, edited")  # converted again: a new PDF, the old one unnamed
    assert _build(docs, fake_model, store).exit_code == 0
    assert first in _pdfs(own)  # the previous generation still names it (a slow reader may be on it)
    [second] = [name for name in _pdfs(own) if name != first]

    (docs / "note.txt").unlink()
    assert _build(docs, fake_model, store).exit_code == 0
    assert _pdfs(own) == [second]  # two commits later the first PDF is gone
    make_png(docs / "more.png", "more")
    assert _build(docs, fake_model, store).exit_code == 0
    assert _pdfs(own) == []  # and the removed document's too
    _verify_ok(store)


def test_a_pdf_store_shared_by_two_collections_keeps_both_collections_pdfs(fake_model, tmp_path, unstable_converter):
    first, second, shared = tmp_path / "first", tmp_path / "second", tmp_path / "pdfs"
    for folder, text in ((first, "the first note"), (second, "the second note")):
        folder.mkdir()
        (folder / "note.txt").write_text(text)
        make_png(folder / "scan.png", text)
    a, b = _qdrant(tmp_path, "a", shared), _qdrant(tmp_path, "b", shared)
    assert _build(first, fake_model, a).exit_code == 0
    assert _build(second, fake_model, b).exit_code == 0
    both = _pdfs(shared)
    assert len(both) == 2

    (first / "note.txt").unlink()  # a no longer names its PDF; b's record still names b's
    for number in range(2):
        make_png(first / f"more{number}.png", f"more {number}")
        assert _build(first, fake_model, a).exit_code == 0
    [left] = _pdfs(shared)  # a's, named by no collection's record, is collected (index/format/pdfstore.py); b's stays
    assert left in both
    _verify_ok(a)
    _verify_ok(b)
