"""A --pdf-store folder shared by several Qdrant collections (index/format/pdfstore.py): each collection's
reference record says which PDFs it names, and a PDF is collected only when no record names it.
Through the store's own transactions (two collections, one folder) and the CLI (kill -9 mid-copy)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli, run_process
from docgen import make_png

SHA = "0" * 64


def _store(tmp_path: Path, collection: str, shared: Path):
    from localgpt_index.index.qdrant.store import QdrantStore
    from localgpt_index.index.qdrant.ids import parse_store_url

    return QdrantStore(parse_store_url(f"qdrant+path://{tmp_path / ('qd-' + collection)}/{collection}"), shared)


def _commit(store, pdf: Path | None) -> None:
    """One generation: a document whose converted PDF is `pdf`, or no document at all."""
    from localgpt_index.core.types import PageRef
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span

    with store.begin() as txn:
        documents = []
        if pdf is not None:
            rel, sha = txn.store_pdf(pdf)
            segment = txn.write_segment([np.ones((2, 8), dtype=np.float32)], 8, [PageRef("/doc.odt", 1, SHA, "office", {})])
            documents = [Document(path="/doc.odt", sha256=SHA, size=1, kind="office", pages=1, pdf=rel, pdf_sha256=sha,
                                  spans=[Span(segment=segment.id, first=0, pages=1)])]
        txn.commit(documents, ModelInfo(id="m", family="fake", fingerprint="f", dim=8), Settings(dim=8))


def _pdfs(shared: Path) -> list[str]:
    return sorted(p.name for p in (shared / "pdf").iterdir())


def _pdf(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(b"%PDF-1.4 " + text.encode())
    return path


def test_a_pdf_two_collections_name_is_kept_until_neither_does(tmp_path):
    shared = tmp_path / "pdfs"
    same = _pdf(tmp_path, "same.pdf", "the same converted bytes in both collections")
    a, b = _store(tmp_path, "a", shared), _store(tmp_path, "b", shared)
    try:
        _commit(a, same)
        _commit(b, same)
        [stored] = _pdfs(shared)
        for _ in range(3):
            _commit(a, None)  # a no longer names it, two commits later not even its previous generation
        assert _pdfs(shared) == [stored]  # b's record still names it
        assert json.loads(a.pdfs().refs.record.read_text())["pdfs"] == []
        _commit(b, None)
        assert _pdfs(shared) == [stored]  # b's previous generation (a slow reader) still names it
        _commit(b, None)
        assert _pdfs(shared) == []  # named by no record: collected
    finally:
        a.close()
        b.close()


def test_an_aborted_transaction_drops_only_what_it_recorded(tmp_path):
    shared = tmp_path / "pdfs"
    kept, staged = _pdf(tmp_path, "kept.pdf", "committed"), _pdf(tmp_path, "staged.pdf", "never committed")
    a = _store(tmp_path, "a", shared)
    try:
        _commit(a, kept)
        [committed] = _pdfs(shared)
        try:
            with a.begin() as txn:
                txn.store_pdf(kept)  # already recorded by the committed generation
                txn.store_pdf(staged)
                raise RuntimeError("the build fails before its commit")
        except RuntimeError:
            pass
        assert _pdfs(shared) == [committed]
        assert json.loads(a.pdfs().refs.record.read_text())["pdfs"] == [f"pdf/{committed}"]
    finally:
        a.close()


def test_a_folder_with_pdfs_from_before_records_is_never_collected(tmp_path):
    shared = tmp_path / "pdfs"
    (shared / "pdf").mkdir(parents=True)
    older = shared / "pdf" / f"{'1' * 64}.pdf"  # an older lgpt-index's PDF, of a collection with no record
    older.write_bytes(b"%PDF-1.4 older")
    a = _store(tmp_path, "a", shared)
    try:
        _commit(a, _pdf(tmp_path, "new.pdf", "new"))
        for _ in range(2):
            _commit(a, None)
        assert len(_pdfs(shared)) == 2 and older.exists()
    finally:
        a.close()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_writer_killed_while_copying_leaves_a_temporary_file_the_next_one_sweeps(fake_model, tmp_path, unstable_converter):
    docs, shared = tmp_path / "docs", tmp_path / "pdfs"
    docs.mkdir()
    (docs / "note.txt").write_text("a converted note")
    make_png(docs / "scan.png", "a scan")
    store = ["--store", f"qdrant+path://{tmp_path / 'qd'}/notes", "--pdf-store", str(shared)]
    killed = run_process("build", str(docs), "--model", str(fake_model), *store, env={"LGPT_FAILPOINT": "pdf-store"})
    assert killed.returncode == -9, killed.stderr
    assert [p.name.startswith(".tmp-") for p in (shared / "pdf").iterdir()] == [True]
    result = run_cli("build", str(docs), "--model", str(fake_model), *store)  # the lock died with the writer
    assert result.exit_code == 0, result.stderr
    names = _pdfs(shared)
    assert len(names) == 1 and not names[0].startswith(".tmp-")
    assert run_cli("verify", *store).exit_code == 0


def test_verify_says_which_records_belong_to_collections_that_are_gone(tmp_path):
    """A record of a deleted collection keeps its PDFs for good: verify says so (a note, exit 0), only of
    collections it can tell are gone (an in-process folder removed, or its collection deleted; the same
    server's alias missing), never of one that exists or of another server's."""
    import shutil

    from localgpt_index.index.qdrant.store import QdrantStore
    from localgpt_index.index.qdrant.ids import parse_store_url

    shared = tmp_path / "pdfs"
    a, b, c = (_store(tmp_path, name, shared) for name in "abc")
    try:
        for store, name in ((a, "a"), (b, "b"), (c, "c")):
            _commit(store, _pdf(tmp_path, f"{name}.pdf", name))
        b.client.delete_collection(b.physical())  # c's collection deleted, its folder kept; b's folder removed
        c.client.delete_collection(c.physical())
        (shared / "refs" / "elsewhere.json").write_text(json.dumps({"location": "qdrant://other.invalid:6333/x", "pdfs": []}))
    finally:
        for store in (a, b, c):
            store.close()
    shutil.rmtree(tmp_path / "qd-b")
    args = ["verify", "--store", f"qdrant+path://{tmp_path / 'qd-a'}/a", "--pdf-store", str(shared)]
    out = run_cli(*args, "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    document = json.loads(out.stdout)
    assert document["ok"] is True and len(document["notes"]) == 2
    gone = [f"qdrant+path://{tmp_path / 'qd-b'}/b", f"qdrant+path://{tmp_path / 'qd-c'}/c"]
    assert all(any(where in note for note in document["notes"]) for where in gone)
    assert all("delete the record" in note and "keeps 1 PDF(s)" in note for note in document["notes"])
    plain = run_cli(*args)
    assert plain.exit_code == 0 and plain.stderr.count("note: ") == 2 and "other.invalid" not in plain.stderr

    server = QdrantStore(parse_store_url("qdrant://qdrant.invalid:6333/a"), shared, client=_store(tmp_path, "a", shared).client)
    try:  # a server's own collections are asked to it: "a" exists there (over the same client), "x" does not
        (shared / "refs" / "same.json").write_text(json.dumps({"location": "qdrant://qdrant.invalid:6333/x", "pdfs": ["pdf/1.pdf"]}))
        (shared / "refs" / "here.json").write_text(json.dumps({"location": "qdrant://qdrant.invalid:6333/a", "pdfs": []}))
        notes = server.verify_notes()
        assert len(notes) == 3 and any("qdrant://qdrant.invalid:6333/x" in note for note in notes)
        assert not any("6333/a," in note or "other.invalid" in note for note in notes)
    finally:
        server.client.close()
