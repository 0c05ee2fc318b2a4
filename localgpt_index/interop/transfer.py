"""Moving documents and their vectors between stores without embedding again (imports, exports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from ..core.errors import IndexProblem
from ..index.format.manifest import Document, Span
from ..core.types import PageRef
from ..core.words import PageWords

SEGMENT_PAGES = 1000  # pages per segment written


PageTexts = Callable[[Document], Sequence[tuple[str, str, PageWords | None] | None]]  # a document's (text, source, words) per page


def write_documents(txn, items: Iterable[tuple[Document, Sequence[np.ndarray]]], dim: int,
                    texts: PageTexts | None = None) -> list[Document]:
    """Write each document's pages into `txn`, in segments of about SEGMENT_PAGES pages, with their
    page text where `texts` knows it; returns the documents with the spans of their new home (their
    other fields as given)."""
    placed: list[tuple[Document, list[tuple[object, int, int]]]] = []
    writer, in_writer = txn.segment_writer(dim), []
    for doc, pages in items:
        spans: list[tuple[object, int, int]] = []
        known = texts(doc) if texts is not None else []
        for number, vectors in enumerate(pages, 1):
            text = known[number - 1] if number <= len(known) else None
            extra = {"text": text[0], "text_source": text[1], "words": text[2]} if text is not None else None
            with txn.writing():
                row = writer.append(vectors, PageRef(doc.path, number, doc.sha256, doc.kind, dict(doc.metadata)), extra)
            if spans and spans[-1][0] is writer and spans[-1][1] + spans[-1][2] == row:
                spans[-1] = (writer, spans[-1][1], spans[-1][2] + 1)
            else:
                spans.append((writer, row, 1))
            if writer.pages >= SEGMENT_PAGES:
                in_writer.append((writer, txn.finish_segment(writer)))
                writer = txn.segment_writer(dim)
        placed.append((doc, spans))
    in_writer.append((writer, txn.finish_segment(writer)))
    segment_of = {id(w): segment.id for w, segment in in_writer if segment is not None}
    return [doc.model_copy(update={"spans": [Span(segment=segment_of[id(w)], first=first, pages=n) for w, first, n in spans],
                                   "pages": sum(n for _, _, n in spans)}) for doc, spans in placed if spans]


@dataclass
class CopyReport:
    source: str
    target: str
    documents: int
    pages: int
    generation: int


def copy_index(index, target, wait_s: float = 0.0) -> CopyReport:
    """The current generation of `index` (any store) into the empty store `target`, stored PDFs and
    page text included (`wait_s`: how long to wait for another writer of `target`)."""
    from ..index.text.artifact import page_texts
    from ..index.text.words import document_words

    manifest = index.manifest
    read: dict = {}
    dim = manifest.model.dim or manifest.settings.dim
    with target.begin(wait_s, rebuild=True) as txn:
        if txn.base is not None and (txn.base.documents or txn.base.in_progress):
            raise IndexProblem(f"{target.location} already holds documents.", hint="Copy into a new, empty index.")
        documents = write_documents(txn, ((doc, index.page_vectors(doc)) for doc in index.documents), dim,
                                    lambda doc: [(*text, words) if text is not None else None for text, words in
                                                 zip(page_texts(manifest.segments, doc, index.blobs(), read),
                                                     document_words(manifest.segments, doc, index.blobs()))])
        documents = [_with_pdf(txn, index, doc) for doc in documents]
        committed = txn.commit(documents, manifest.model, manifest.settings, manifest.failures)
    return CopyReport(index.store.location, target.location, len(documents), committed.page_count, committed.generation)


def _with_pdf(txn, index, doc: Document) -> Document:
    """A converted document's stored PDF comes along where the target keeps PDFs."""
    if not doc.pdf:
        return doc
    stored = txn.store_pdf(index.store.pdf_file(doc.pdf))
    if stored is None:
        return doc.model_copy(update={"pdf": None, "pdf_sha256": None})
    return doc.model_copy(update={"pdf": stored[0], "pdf_sha256": stored[1]})
