"""Text follows: page text read after its vectors were committed, landed in a later generation.

Pixels first (ingest/pagetext.py): a page whose OCR is not read when it is encoded is committed with
its vectors and its text "pending" (its segment's text part counts it). Its text lands in a later
generation: each segment with such rows gets a new text part (those rows read, the others as they
were: index/text/artifact.py `retexted_part`), and a commit of the same catalog names them, the
lexical index brought up to date with them, in the same transaction, with the same checksums and the
same HEAD as any commit (a kill before it leaves the visual generation answering, its text pending).
Two ways in: the build's own OCR, resolved once its visual commit is done (`follow_build`), and the
pages a generation records as pending, read with no model (`read_pending`: `build --text-only`,
the next build, a watcher's builds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..core.failpoints import failpoint
from ..core.files import sha256_file
from ..index.artifacts import BlobSink, BlobSource
from ..index.format.manifest import Document, Manifest, PartRef
from ..index.text.artifact import TEXT, pending_rows, read_text_part, retexted_part
from ..index.text.words import WORDS, rewritten_words_part
from ..index.transaction import Transaction
from ..ingest.pagetext import LaterPage, PageTexts, PendingText, TextSettings, read_later
from ..ingest.text import PageText

Log = Callable[[str], None]
Timings = Callable[[str, float], None]


@dataclass(frozen=True)
class PendingPage:
    """A page a generation holds with its text pending: whose, where its row is, its text layer so far."""

    document: Document
    page: int  # 1-based, in the document
    segment: str
    row: int
    layer: str


def pending_pages(manifest: Manifest | None, source: BlobSource) -> list[PendingPage]:
    """The pages of `manifest`'s documents (complete or in progress) whose text is pending. Reads only
    the text parts whose record counts pending rows."""
    if manifest is None:
        return []
    rows: dict[str, list[tuple[str, str]]] = {}
    for sid, segment in manifest.segments.items():
        if pending_rows(ref := segment.parts.get(TEXT)):
            assert ref is not None
            rows[sid] = read_text_part(ref, source)
    found: list[PendingPage] = []
    for doc in [*manifest.documents, *manifest.in_progress] if rows else []:
        before = 0  # the document's pages in its spans before this one
        for span in doc.spans:
            texts = rows.get(span.segment, [])
            for row in range(span.first, min(span.first + span.pages, len(texts))):
                if texts[row][1] == "pending":
                    found.append(PendingPage(doc, before + row - span.first + 1, span.segment, row, texts[row][0]))
            before += span.pages
    return found


def retext(txn: Transaction, texts: Mapping[str, Mapping[int, PageText]]) -> bool:
    """Each segment in `texts` staged with those rows' text, for the next commit; False: nothing to stage."""
    texts = {sid: rows for sid, rows in texts.items() if rows and sid in txn.staging.segments}
    for sid, rows in texts.items():
        txn.replace_part(sid, TEXT, partial(_retexted, {row: (text.text, text.source) for row, text in rows.items()}))
        if WORDS in txn.staging.segments[sid].parts:  # (a segment from before word positions has none to replace)
            txn.replace_part(sid, WORDS, partial(rewritten_words_part, {row: text.words for row, text in rows.items()}))
    return bool(texts)


def commit_texts(txn: Transaction, texts: Mapping[str, Mapping[int, PageText]]) -> Manifest | None:
    """A generation after the current one: its catalog, each segment in `texts` with those rows' text
    (None: nothing to commit)."""
    current = txn.current
    if current is None or not retext(txn, {sid: rows for sid, rows in texts.items() if sid in current.segments}):
        return None
    failpoint("text-commit")  # tests: a kill between the visual commit and the text's
    return txn.commit(current.documents, current.model, current.settings, current.failures, current.in_progress)


def _retexted(rows: Mapping[int, tuple[str, str]], ref: PartRef, source: BlobSource, sink: BlobSink) -> PartRef:
    return retexted_part(ref, rows, source, sink)


Followup = tuple[str, int, PendingText]  # a row committed pending by this build: its segment, its row, its text to come


def read_so_far(followups: list[Followup], read: Callable[[PendingText], PageText | None]) -> dict[str, dict[int, PageText]]:
    """The rows of `followups` whose text `read` gives (taken out of the list): by segment, by row."""
    texts: dict[str, dict[int, PageText]] = {}
    left: list[Followup] = []
    for segment, row, pending in followups:
        text = read(pending)
        if text is not None and text.source != "pending":
            texts.setdefault(segment, {})[row] = text
        elif text is None:  # not read yet (or its document given up: `resolve` says so at the end)
            left.append((segment, row, pending))
    followups[:] = left
    return texts


def follow_build(txn: Transaction, followups: list[Followup], texts: PageTexts) -> Manifest | None:
    """After a build's visual commit: the rows it committed pending, their OCR waited for, committed."""
    read = read_so_far(followups, texts.resolve)
    followups.clear()
    return commit_texts(txn, read)


def read_pending(txn: Transaction, settings: TextSettings, log: Log, timings: Timings) -> tuple[int, Manifest | None]:
    """The pages the current generation holds pending, read by OCR (no model) and committed: (pages read,
    the new generation). A document whose file changed since is left to the next build (which embeds it again)."""
    pages = pending_pages(txn.current, txn.backend.base_blobs())
    if not pages or settings.tesseract is None:
        return 0, None
    later: list[LaterPage] = []
    wanted: list[PendingPage] = []
    unchanged: dict[str, bool] = {}
    for page in pages:
        doc = page.document
        if doc.pdf is not None:  # converted: its stored PDF, named by its content
            path, image = txn.pdf_path(doc.pdf), False
        else:
            if doc.path not in unchanged:
                unchanged[doc.path] = _unchanged(doc)
                if not unchanged[doc.path]:
                    log(f"note: {doc.path} changed since it was indexed: its text is read when the next build indexes it again")
            if not unchanged[doc.path]:
                continue
            path, image = Path(doc.path), doc.kind == "image"
        later.append(LaterPage(path, image, page.page, page.layer))
        wanted.append(page)
    read: dict[str, dict[int, PageText]] = {}
    for page, (text, warning) in zip(wanted, read_later(settings, later, timings)):
        if warning:
            log(f"warning: {page.document.path} page {page.page}: {warning}; the page is indexed, without OCR text")
        read.setdefault(page.segment, {})[page.row] = text
    return len(wanted), commit_texts(txn, read)


def _unchanged(doc: Document) -> bool:
    try:
        return sha256_file(doc.path) == doc.sha256
    except OSError:
        return False
