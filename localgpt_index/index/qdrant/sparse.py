"""The sparse lexical vector of each page point ("lexical"): the Qdrant side of the one BM25 (index/text/bm25.py).

A page's vector holds, for each distinct token of OUR tokenizer (index/text/tokenize.py), its term id
(`term_id`: the first 4 bytes of the token's BLAKE2b digest, a stable 32-bit hash; two tokens that
collide are one term, their weights summed: at ~10^5 distinct tokens about one pair in a million
pairs shares an id, which can only raise a page that holds the other token) and BM25's saturated,
length-normalised term frequency, tf_weight(tf, |d|, avgdl). Qdrant's IDF modifier applies
idf = ln(1 + (N - n + 0.5) / (n + 0.5)) at query time: the formula of bm25.py, so a query vector of
ones scores a page exactly as the FTS5 engine does, when N, n and avgdl are the same:

- N and n: the query scopes the IDF statistics to the generation's visible points (`IdfCorpusParams`
  with the reader's visible filter), so points of removed documents (gen_removed) and of writes not
  yet committed (visible_from PENDING), which do exist in the collection, do not count. Without that
  scope Qdrant counts every point that has the vector (tests/test_qdrant_sparse.py measures the skew).
- avgdl is fixed when a page's vector is written: at the commit that first shows it, the mean token
  count of that generation's pages (the "lexical" artifact's record). A later incremental build
  changes the mean; older pages keep theirs (a drift of their length normalisation only; `build
  --rebuild` writes every vector with the new mean).

Vectors are written at commit, after the points are shown and before HEAD moves: a kill before HEAD
leaves the old generation answering, and the points it wrote are discarded as any staged point.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from ..manifest import Manifest
from ..text.artifact import LEXICAL, TEXT, read_text_part
from ..text.bm25 import WEIGHTING
from ..text.tokenize import tokenize
from .ids import _models, point_id

SPARSE = "lexical"
BATCH = 64


def term_id(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "little")


def page_vector(text: str, avgdl: float) -> tuple[list[int], list[float]]:
    """(indices, values) of a page's text: BM25 term-frequency weights by term id."""
    tokens = tokenize(text)
    counts = Counter(tokens)
    weights: dict[int, float] = {}
    for token, tf in counts.items():
        weight = float(WEIGHTING.tf_weight(tf, len(tokens), avgdl))
        term = term_id(token)
        weights[term] = weights.get(term, 0.0) + weight
    indices = sorted(weights)
    return indices, [weights[i] for i in indices]


def query_vector(text: str) -> tuple[list[int], list[float]]:
    """Each distinct query token once (as the FTS5 engine sums over distinct tokens)."""
    indices = sorted({term_id(token) for token in tokenize(text)})
    return indices, [1.0] * len(indices)


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


def write_vectors(txn: Any, manifest: Manifest, previous: Manifest | None, rebuilt: bool) -> int:
    """The sparse vectors of the pages of `manifest` whose text is new since `previous` (all of them
    when `rebuilt`); returns how many points got one."""
    avgdl = avgdl_of(manifest)
    if avgdl is None or not has_sparse(txn.client, txn.physical):
        return 0
    models = _models()
    source = txn.base_blobs()
    shown = {span.segment for doc in previous.documents for span in doc.spans} if previous and not rebuilt else set()
    texts: dict[str, list[tuple[str, str]]] = {}
    batch: list = []
    written = 0
    for doc in manifest.documents:
        for span in doc.spans:
            segment = manifest.segments.get(span.segment)
            part = segment.parts.get(TEXT) if segment else None
            old = previous.segments.get(span.segment) if previous and span.segment in shown else None
            if part is None or (old is not None and old.parts.get(TEXT) == part):
                continue  # no text, or its vectors were written by the commit that first showed it
            if span.segment not in texts:
                texts[span.segment] = read_text_part(part, source)
            rows = texts[span.segment]
            for row in range(span.first, min(span.first + span.pages, len(rows))):
                if not rows[row][0]:
                    continue
                indices, values = page_vector(rows[row][0], avgdl)
                batch.append(models.PointVectors(id=point_id(span.segment, row),
                                                 vector={SPARSE: models.SparseVector(indices=indices, values=values)}))
                if len(batch) >= BATCH:
                    written += _flush(txn, batch)
    return written + _flush(txn, batch)


def _flush(txn: Any, batch: list) -> int:
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
