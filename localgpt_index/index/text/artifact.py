"""Page text and the full-text index as per-generation artifacts of the one transaction.

See index/artifacts.py and docs/dev/transaction-core.md, "Per-generation artifacts".

- "text", a part per segment: every page's text and where it came from (`extra` of
  `SegmentWriter.append`: {"text", "text_source"}, from ingest/pagetext), in row order, as one
  zlib-compressed JSON blob. The source of truth for a page's text; checksummed like the vectors.
  A page committed before its OCR was read has the source "pending" (and its text layer so far; its
  meta counts them): a later generation names a new part for the segment with the text read
  (`retexted_part`, through `Transaction.replace_part`), the vectors untouched.
- "lexical", one per generation: the FTS5 index (engine.py) as one SQLite database image. Built at
  commit incrementally: the base generation's image, minus the removed (and replaced) documents'
  pages, plus the added documents' pages read from their segments' text parts; the other rows are
  not touched. With no base image (the first generation, or one from before page text) it is built
  from every live document's text part. A page whose segment has no text part is not in it.

- "words", a part per segment: each page's word positions (index/text/words.py), beside the text part.

A reader opens "lexical" from the generation HEAD names, so it sees the vectors and the text of one
generation; a kill before HEAD moves leaves the old generation's pair answering.

The manifest records the analysis in the artifact's meta ("tokenizer": the analysis version,
"languages": those its pages were stemmed in; the SQLite image, those it was told: the manifest's
`settings.language`, which rebuilds it when changed). A text index of another analysis is not opened (the
generation answers visually); `lgpt-index upgrade`, or the next commit, builds it again from the
stored page text: the vectors are not touched.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from typing import TypeGuard

import numpy as np

from ...core.errors import IndexProblem
from ...core.plugins import hookimpl
from ...core.types import PageRef
from ..artifacts import Artifact, BlobSink, BlobSource, CommitContext
from ..format.manifest import ArtifactRef, Document, Manifest, PartRef, Segment
from .engine import LexicalError, LexicalIndex, LexicalPage
from .language import told
from .tokenize import TOKENIZER_VERSION
from .words import WORDS, WordsArtifact

TEXT = "text"
LEXICAL = "lexical"
TEXT_SOURCES = ("layer", "ocr", "none", "pending")


class TextPartWriter:
    """A segment's page texts, in row order."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []

    def add(self, row: int, vectors: np.ndarray, page: PageRef | None, extra: Mapping[str, object]) -> None:
        if row != len(self.rows):
            raise ValueError(f"text part: row {row} after {len(self.rows)} rows")
        text, source = extra.get("text", ""), extra.get("text_source", "none")
        self.rows.append((text if isinstance(text, str) else "", str(source) if source in TEXT_SOURCES else "none"))

    def seal(self, sink: BlobSink) -> PartRef:
        return _text_part(self.rows, sink)

    def discard(self) -> None:
        self.rows = []


def _text_part(rows: list[tuple[str, str]], sink: BlobSink) -> PartRef:
    data = zlib.compress(json.dumps(rows, ensure_ascii=False).encode("utf-8", "surrogatepass"), 6)
    counts = {source: sum(1 for _, s in rows if s == source) for source in TEXT_SOURCES}
    if not counts["pending"]:
        del counts["pending"]  # as a part from before pending text: the same blob, the same record
    return PartRef(version=TextArtifact.version, blobs=[sink.put(data, "jsonz")], meta={"rows": len(rows), **counts})


def pending_rows(ref: PartRef | None) -> int:
    """How many rows of a segment's text part wait for their OCR (from its record: no blob read)."""
    pending = ref.meta.get("pending", 0) if ref is not None else 0
    return pending if isinstance(pending, int) else 0


def retexted_part(ref: PartRef, rows: Mapping[int, tuple[str, str]], source: BlobSource, sink: BlobSink) -> PartRef:
    """A segment's text part with `rows` (row -> (text, source)) read since: the others as they were."""
    current = read_text_part(ref, source)
    for row, (text, found) in rows.items():
        if not 0 <= row < len(current):
            raise ValueError(f"text part: row {row} of {len(current)}")
        current[row] = (text, found if found in TEXT_SOURCES else "none")
    return _text_part(current, sink)


def read_text_part(ref: PartRef, source: BlobSource) -> list[tuple[str, str]]:
    """A segment's (text, source) rows; IndexProblem if the blob is damaged."""
    try:
        rows = json.loads(zlib.decompress(source.read(ref.blobs[0])).decode("utf-8", "surrogatepass"))
    except (zlib.error, ValueError, IndexError) as exc:
        raise IndexProblem(f"a text part is damaged ({exc}).") from None
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 2 and all(isinstance(v, str) for v in r) for r in rows):
        raise IndexProblem("a text part is damaged (not a list of [text, source] rows).")
    return [(text, source) for text, source in rows]


def page_texts(segments: Mapping[str, Segment], doc: Document, source: BlobSource,
               cache: dict[str, list[tuple[str, str]] | None] | None = None) -> list[tuple[str, str] | None]:
    """Each page's (text, source) of `doc`, in page order; None for a page written without a text part
    (before the index kept page text; or in a segment `segments` lacks). `cache`: text parts already read, by segment id."""
    cache = {} if cache is None else cache
    found: list[tuple[str, str] | None] = []
    for span in doc.spans:
        if span.segment not in cache:
            segment = segments.get(span.segment)
            part = segment.parts.get(TEXT) if segment is not None else None
            cache[span.segment] = read_text_part(part, source) if part is not None else None
        rows = cache[span.segment]
        found += [rows[row] if rows is not None and row < len(rows) else None for row in range(span.first, span.first + span.pages)]
    return found


class TextArtifact:
    """The per-segment page text."""

    name = TEXT
    version = 1

    def part_writer(self, dim: int) -> TextPartWriter:
        return TextPartWriter()

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        return None  # a segment written before page text existed has none: a --rebuild reads it

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef | None:
        return None

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        try:
            rows = read_text_part(ref, source)
        except IndexProblem as exc:
            return [exc.message]
        return [] if len(rows) == ref.meta.get("rows") else [f"{len(rows)} rows of text, its record says {ref.meta.get('rows')}"]

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> object:
        return dict(parts)


class LexicalArtifact:
    """The generation's full-text index (one SQLite FTS5 image)."""

    name = LEXICAL
    version = 2

    def part_writer(self, dim: int) -> None:
        return None

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        return None

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef | None:
        parts = ctx.parts(TEXT)
        if not parts:
            return None  # no page text in this generation: queries stay visual
        languages = told(ctx.settings.language if ctx.settings is not None else None)
        base = self._base(ctx)
        if base is not None and base.told != languages:  # told another language (--language): built afresh
            base.close()
            base = None
        retexted = _retexted(ctx)
        if base is not None and not ctx.added and not ctx.removed and not retexted:
            return ctx.base_ref
        if base is None:
            index, removed, added = LexicalIndex.create(languages=languages), [], ctx.documents
        else:
            index, removed, added = base, [doc.path for doc in ctx.removed + retexted], ctx.added + retexted
        index.update(removed=removed, added=_pages(added, parts, ctx.source))
        pages, tokens, languages = index.page_count(), index.token_count(), index.languages()
        ref = sink.put(index.to_bytes(), "sqlite")
        index.close()
        # tokens: avgdl = tokens / pages, the length normalisation of the Qdrant sparse vectors (index/qdrant/sparse.py)
        return ArtifactRef(version=self.version, blobs=[ref], meta={"pages": pages, "tokens": tokens, "tokenizer": TOKENIZER_VERSION,
                                                                    "languages": ",".join(languages)})

    def _base(self, ctx: CommitContext) -> LexicalIndex | None:
        ref = ctx.base_ref
        if not current(ref):
            return None  # none yet, or another analysis's: built afresh from the text parts
        return LexicalIndex.from_bytes(ctx.source.read(ref.blobs[0]), "the base generation's text index")

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        try:
            index = LexicalIndex.from_bytes(source.read(ref.blobs[0]))
        except (LexicalError, IndexProblem) as exc:
            return [str(exc)]
        try:
            problems = index.problems()
            if index.page_count() != ref.meta.get("pages"):
                problems.append(f"{index.page_count()} pages, its record says {ref.meta.get('pages')}")
            return problems
        finally:
            index.close()

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> LexicalIndex | None:
        if not current(ref):
            return None  # another analysis's: until `upgrade` or a commit builds it again, queries are visual
        try:
            return LexicalIndex.from_bytes(source.read(ref.blobs[0]), "this generation's text index")
        except LexicalError as exc:
            raise IndexProblem(str(exc), hint="`lgpt-index verify` checks the index; `build --rebuild` rewrites it.") from None


def current(ref: ArtifactRef | None) -> TypeGuard[ArtifactRef]:
    """Whether a generation's text index is of this version and analysis (else a commit builds it again)."""
    return ref is not None and ref.version == LexicalArtifact.version and ref.meta.get("tokenizer") == TOKENIZER_VERSION


def _retexted(ctx: CommitContext) -> list[Document]:
    """Kept documents whose segments' text parts changed (the same vectors, another text: --ocr)."""
    if ctx.base is None:
        return []
    changed = []
    for doc in ctx.kept:
        for span in doc.spans:
            old, new = ctx.base.segments.get(span.segment), ctx.segments.get(span.segment)
            if (old.parts.get(TEXT) if old else None) != (new.parts.get(TEXT) if new else None):
                changed.append(doc)
                break
    return changed


def _pages(documents: list[Document], parts: Mapping[str, PartRef], source: BlobSource) -> Iterator[LexicalPage]:
    """The pages of `documents` that have text, from their segments' text parts."""
    cache: dict[str, list[tuple[str, str]]] = {}
    for doc in documents:
        page = 0
        for span in doc.spans:
            part = parts.get(span.segment)
            if part is not None and span.segment not in cache:
                cache[span.segment] = read_text_part(part, source)
            rows = cache.get(span.segment)
            for row in range(span.first, span.first + span.pages):
                page += 1
                if rows is not None and row < len(rows) and rows[row][0]:
                    yield LexicalPage(doc.path, page, rows[row][0])


def needs_words(segment: Segment) -> bool:
    """Whether a segment has page text but no word positions of this version (written before they were kept)."""
    part = segment.parts.get(WORDS)
    return TEXT in segment.parts and (part is None or part.version != WordsArtifact.version)


def positions_missing(manifest: Manifest) -> bool:
    """Whether some segment of a generation lacks the word positions of its page text (`lgpt-index upgrade` adds them)."""
    return any(needs_words(segment) for segment in manifest.segments.values())


ARTIFACTS: tuple[Artifact, ...] = (TextArtifact(), LexicalArtifact(), WordsArtifact())


@hookimpl(trylast=True)
def lgpt_artifacts() -> tuple[Artifact, ...]:
    """The built-in page text, full-text index and word positions (index/artifacts.py lists them first)."""
    return ARTIFACTS
