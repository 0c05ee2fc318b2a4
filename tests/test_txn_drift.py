"""Where the two stores' transactions had drifted apart, and now behave as one (index/transaction.py):
a commit naming an unknown segment is refused by both; a stored PDF is checked before a resumed
conversion opens it, locally too; and an aborted transaction keeps what the previous generation
names (a slow reader may be on it). Through the stores' public transactions."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from localgpt_index.core.errors import IndexProblem
from localgpt_index.core.types import PageRef

SHA = "0" * 64


def _store(kind: str, tmp_path: Path):
    from localgpt_index.index.open import open_store

    if kind == "local":
        return open_store(index_dir=tmp_path / "idx")
    return open_store(f"qdrant+path://{tmp_path / 'qd'}/notes")


def _doc(segment: str, path: str = "/a.pdf", pdf: str | None = None):
    from localgpt_index.index.format.manifest import Document, Span

    return Document(path=path, sha256=SHA, size=1, kind="pdf", pages=1, spans=[Span(segment=segment, first=0, pages=1)],
                    pdf=pdf, pdf_sha256=SHA if pdf else None)


def _model():
    from localgpt_index.index.format.manifest import ModelInfo, Settings

    return ModelInfo(id="m", family="fake", fingerprint="f", dim=8), Settings(dim=8)


@pytest.mark.parametrize("kind", ["local", "qdrant"])
def test_a_commit_naming_a_segment_the_transaction_does_not_know_is_refused(kind, tmp_path):
    store = _store(kind, tmp_path)
    try:
        with store.begin() as txn:
            with pytest.raises(ValueError, match="segments this transaction does not know"):
                txn.commit([_doc("seg-unknown")], *_model())
        assert not store.exists()  # nothing was published
    finally:
        store.close()


def test_a_stored_pdf_planted_as_a_fifo_is_refused_before_a_resumed_conversion_opens_it(tmp_path):
    store = _store("local", tmp_path)
    rel = f"pdf/{SHA}.pdf"
    with store.begin() as txn:
        (store.root / "pdf").mkdir(parents=True)
        os.mkfifo(store.root / rel)  # opening it would block the build forever
        with pytest.raises(IndexProblem, match="not a regular file"):
            txn.pdf_path(rel)


def test_an_aborted_transaction_keeps_a_segment_the_previous_generation_names(tmp_path):
    store = _store("local", tmp_path)
    page = [np.full((2, 8), 0.5, dtype=np.float32)]
    ref = [PageRef("/a.pdf", 1, SHA, "pdf", {})]
    with pytest.raises(RuntimeError):
        with store.begin() as txn:
            segment = txn.write_segment(page, 8, ref)
            txn.commit([_doc(segment.id)], *_model())  # generation 1 names the segment
            txn.commit([], *_model())  # generation 2 does not; a slow reader may still be on 1
            again = txn.write_segment(page, 8, ref)  # the same bytes: the same content-named files, staged
            assert again.id == segment.id
            raise RuntimeError("the build fails before its next commit")
    files = sorted(p.name for p in (store.root / "segments").iterdir())
    assert files == [f"{segment.id}.offsets.npy", f"{segment.id}.vectors.npy"]
