"""The sparse lexical vector of each page point ("lexical"): the Qdrant side of the one BM25 (text/engine.py).

A page's vector holds, for each distinct token of OUR analysis (index/text/tokenize.py: exact tokens and
stems in the page's language, detected as the text index detects it), its term id
(`term_id`: the first 4 bytes of the token's BLAKE2b digest, a stable 32-bit hash; two tokens that
collide are one term, their weights summed: at ~10^5 distinct tokens about one pair in a million
pairs shares an id, which can only raise a page that holds the other token) and BM25's saturated,
length-normalised term frequency, tf_weight(tf, |d|, avgdl). Qdrant's IDF modifier applies
idf = ln(1 + (N - n + 0.5) / (n + 0.5)) at query time: the formula of text/engine.py, so a query vector of
ones scores a page exactly as the FTS5 engine does, when N, n and avgdl are the same:

- N and n: the query scopes the IDF statistics to the generation's visible points (`IdfCorpusParams`
  with the reader's visible filter), so points of removed documents (gen_removed) and of writes not
  yet committed (visible_from PENDING), which do exist in the collection, do not count. Without that
  scope Qdrant counts every point that has the vector (tests/test_qdrant_sparse.py measures the skew).
- avgdl: Qdrant cannot normalise a page's length at query time (a sparse score is a dot product), so
  the weights carry it. Every visible page's vector is weighted with ONE reference avgdl, which HEAD
  records ("sparse_avgdl"): a commit writes its new pages with it, so a generation's Qdrant scores are
  exactly BM25's with avgdl = the reference, and each page's score is within drift / (1 - drift) of
  the local engine's (drift = |reference / exact mean - 1|, the mean from the "lexical" artifact's
  pages and tokens). While the drift stays within AVGDL_TOLERANCE (1 %), nothing else is written:
  pages whose local scores differ by more than about 2 % keep their order. A commit that takes it
  further (a collection grown or shrunk) renormalises: once HEAD has moved, every page's vector is
  rewritten with the exact mean, which HEAD then records as the reference. Until then HEAD records
  none, so a kill -9 during the rewrite (the answering generation has pages of both means, scores
  within the old drift) makes the next commit rewrite them all again. The same happens after a HEAD
  from before the reference (its pages kept the mean of the commit that wrote them). A first commit
  and a --rebuild write every page with the exact mean. The rewrite is one pass over the page text;
  the tolerance bounds how often a growing or shrinking collection pays it.

A commit whose analysis differs from its base's (a text index of another tokenizer version, which `upgrade`
builds again; another --language) writes every page's vector, as a first commit does.

Vectors are written at commit, after the points are shown and before HEAD moves: a kill before HEAD
leaves the old generation answering, and the points it wrote are discarded as any staged point.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..artifacts import BlobSource
from ..format.manifest import Document, Manifest
from ..text.artifact import LEXICAL, TEXT, current, read_text_part
from ..text.engine import WEIGHTING
from ..text.language import detect, told
from ..text.query import TextQuery
from ..text.tokenize import tokenize
from .catalog import read_head
from .ids import HEAD_ID, LeaseLost, _models, catalog_of, point_id
from .writer import QdrantWriting

SPARSE = "lexical"
BATCH = 64
AVGDL_TOLERANCE = 0.01  # the reference avgdl's relative drift from the exact mean that makes a commit rewrite every vector
HEAD_KEY = "sparse_avgdl"  # the reference avgdl, in HEAD's payload


def term_id(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "little")


def page_vector(text: str, avgdl: float, language: str | None = None) -> tuple[list[int], list[float]]:
    """(indices, values) of a page's text, stemmed in its document's `language`: BM25 term-frequency weights by term id."""
    tokens = tokenize(text, language)
    counts = Counter(tokens)
    weights: dict[int, float] = {}
    for token, tf in counts.items():
        weight = float(WEIGHTING.tf_weight(tf, len(tokens), avgdl))
        term = term_id(token)
        weights[term] = weights.get(term, 0.0) + weight
    indices = sorted(weights)
    return indices, [weights[i] for i in indices]


def query_vector(query: TextQuery) -> tuple[list[int], list[float]]:
    """Each distinct query token and stem once (as the FTS5 engine sums over distinct tokens)."""
    indices = sorted({term_id(token) for token in query.terms})
    return indices, [1.0] * len(indices)


def languages_of(manifest: Manifest) -> tuple[str, ...]:
    """The languages the generation's pages were stemmed in (its text index records them): a query is stemmed in each."""
    ref = manifest.artifacts.get(LEXICAL)
    recorded = ref.meta.get("languages") if ref is not None else None
    return tuple(filter(None, recorded.split(","))) if isinstance(recorded, str) else ()


def sparse_config() -> dict:
    models = _models()
    return {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)}


def has_sparse(client: Any, collection: str) -> bool:
    """Whether the collection was created with the sparse vector (collections from before it were not)."""
    params = client.get_collection(collection).config.params
    return SPARSE in (params.sparse_vectors or {})


def avgdl_of(manifest: Manifest) -> float | None:
    """The mean token count of the generation's pages with text (None: its text index does not record it)."""
    ref = manifest.artifacts.get(LEXICAL)
    pages, tokens = (ref.meta.get("pages"), ref.meta.get("tokens")) if ref is not None else (None, None)
    if not isinstance(pages, int) or not isinstance(tokens, int) or pages <= 0:
        return None
    return tokens / pages


def reference_avgdl(exact: float, reference: float | None) -> tuple[float, bool]:
    """(the avgdl this commit's new pages are weighted with, whether every page's vector must then be
    rewritten with `exact`): the recorded reference, while the exact mean stays within AVGDL_TOLERANCE of it."""
    if reference is None or reference <= 0:
        return exact, True
    return reference, abs(reference / exact - 1) > AVGDL_TOLERANCE


def recorded_reference(txn: QdrantWriting, previous: Manifest | None) -> float | None:
    """The reference avgdl HEAD records for `previous` (None: no HEAD of that generation, a
    renormalisation that did not finish, or a HEAD from before the reference)."""
    head = read_head(txn.store, txn.physical) if previous is not None else None
    if head is None or previous is None or head.get("generation") != previous.generation:
        return None
    value = head.get(HEAD_KEY)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class SparseCommit:
    """What a commit wrote of the sparse vectors: HEAD's record, and the rewrite that follows HEAD."""

    manifest: Manifest
    written: int
    reference: float | None  # to record in HEAD (None: no reference yet, a rewrite follows)
    renormalise: float | None = None  # the exact mean every page is to be rewritten with, once HEAD has moved


def after_head(txn: QdrantWriting, sparse: SparseCommit | None) -> SparseCommit | None:
    """Once HEAD has moved: the rewrite, if the commit needs one; returns what is left to do (nothing: None).
    Best effort: HEAD records no reference until it is done, so the next commit rewrites every vector
    if this one does not."""
    if sparse is None or sparse.renormalise is None:
        return None
    try:
        renormalise(txn, sparse.manifest, sparse.renormalise)
    except LeaseLost:
        raise
    except Exception:
        pass
    return None


def with_reference(receipt: dict, sparse: SparseCommit | None) -> dict:
    """HEAD's payload with the reference avgdl of the commit's sparse vectors (None while a rewrite is due)."""
    return {**receipt, HEAD_KEY: sparse.reference} if sparse is not None else receipt


def write_vectors(txn: QdrantWriting, manifest: Manifest, previous: Manifest | None, rebuilt: bool) -> SparseCommit | None:
    """Before HEAD: the sparse vectors of the pages of `manifest` whose text is new since `previous`
    (every page's when `rebuilt` or first), weighted with HEAD's reference avgdl (the exact mean when
    there is none). None: the collection or the generation has no sparse vectors."""
    exact = avgdl_of(manifest)
    if exact is None or not has_sparse(txn.client, txn.physical):
        return None
    if rebuilt or previous is None or not same_analysis(previous, manifest):
        return SparseCommit(manifest, _write_pages(txn, manifest, None, exact), exact)
    avgdl, due = reference_avgdl(exact, recorded_reference(txn, previous))
    written = _write_pages(txn, manifest, previous, avgdl)
    return SparseCommit(manifest, written, None, exact) if due else SparseCommit(manifest, written, avgdl)


def same_analysis(previous: Manifest, manifest: Manifest) -> bool:
    """Whether `previous`'s vectors were cut by the analysis `manifest`'s are (else every page's is written
    again: `upgrade` after a new analysis, another --language)."""
    return current(previous.artifacts.get(LEXICAL)) and previous.settings.language == manifest.settings.language


def renormalise(txn: QdrantWriting, manifest: Manifest, avgdl: float) -> int:
    """After HEAD (which records no reference meanwhile): every page's vector weighted with `avgdl`,
    then HEAD records it, if HEAD is still this writer's and of this generation."""
    written = _write_pages(txn, manifest, None, avgdl)
    models = _models()
    txn.fence()
    mine = models.Filter(must=[models.HasIdCondition(has_id=[HEAD_ID]),
                               models.FieldCondition(key="writer", match=models.MatchValue(value=txn.token)),
                               models.FieldCondition(key="generation", match=models.MatchValue(value=manifest.generation))])
    with txn.writing():
        txn.client.set_payload(catalog_of(txn.physical), {HEAD_KEY: avgdl}, points=mine, wait=True)
    return written


def _write_pages(txn: QdrantWriting, manifest: Manifest, previous: Manifest | None, avgdl: float) -> int:
    """The vectors of the pages with text of `manifest`, but those whose text part `previous` shows already."""
    models = _models()
    source = txn.base_blobs()
    shown = {span.segment for doc in previous.documents for span in doc.spans} if previous is not None else set()
    texts: dict[str, list[tuple[str, str]]] = {}
    batch: list = []
    written = 0
    for doc in manifest.documents:
        pages = _document_pages(doc, manifest, previous, shown, source, texts)
        if not any(due for *_, due in pages):
            continue  # no text, or its vectors (of the same reference) were written by an earlier commit
        language = detect((text for _, _, text, _ in pages), told(manifest.settings.language))  # as the text index does
        for segment, row, text, due in pages:
            if not due:
                continue
            indices, values = page_vector(text, avgdl, language)
            vector = {SPARSE: models.SparseVector(indices=indices, values=values)}
            batch.append(models.PointVectors(id=point_id(segment, row), vector=vector))
            if len(batch) >= BATCH:
                written += _flush(txn, batch)
    return written + _flush(txn, batch)


def _document_pages(doc: Document, manifest: Manifest, previous: Manifest | None, shown: set[str], source: BlobSource,
                    texts: dict[str, list[tuple[str, str]]]) -> list[tuple[str, int, str, bool]]:
    """(segment, row, text, whether its vector is due) of each page of `doc` with text, in page order; a
    document none of whose text parts is new is not read."""
    spans = []
    for span in doc.spans:
        segment = manifest.segments.get(span.segment)
        part = segment.parts.get(TEXT) if segment else None
        old = previous.segments.get(span.segment) if previous is not None and span.segment in shown else None
        if part is not None:
            spans.append((span, part, old is None or old.parts.get(TEXT) != part))
    if not any(due for *_, due in spans):
        return []
    pages = []
    for span, part, due in spans:
        if span.segment not in texts:
            texts[span.segment] = read_text_part(part, source)
        rows = texts[span.segment]
        last = min(span.first + span.pages, len(rows))
        pages += [(span.segment, row, rows[row][0], due) for row in range(span.first, last) if rows[row][0]]
    return pages


def _flush(txn: QdrantWriting, batch: list) -> int:
    if not batch:
        return 0
    txn.fence()
    with txn.writing():
        txn.client.update_vectors(txn.physical, points=batch, wait=True)
    count = len(batch)
    batch.clear()
    return count


def idf_scope(generation: int):
    """Search params whose IDF counts only the points a reader of `generation` sees."""
    from .ids import visible_filter

    models = _models()
    return models.SearchParams(idf=models.IdfCorpusParams(corpus=visible_filter(generation)))
