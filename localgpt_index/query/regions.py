"""Where on the page: regions for the returned hits, from the page's words and from the patches.

A text region is a box of the words holding the query's terms under the index's analysis
(index/text/regions.py, from the word positions stored with the page text); a visual region is a
cluster of the patches each query token matched best (the MaxSim argmax), mapped to the page through
the family's patch geometry (models/geometry.py). Only the top k are given regions, from vectors read
for them alone, so a query that does not ask for regions pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.types import Region, SearchHit
from ..index.format.manifest import Document
from ..index.protocols import View
from ..index.text.engine import LexicalIndex
from ..index.text.lexicon import QueryAnalysis
from ..index.text.regions import page_text_regions
from ..index.text.words import WORDS, WordPositions
from .patches import clustered, page_pixels, pages_of, patch_geometry
from .request import QueryRequest

MAX_REGIONS = 8  # regions per hit: the text ones first, then the visual ones


def attach_regions(view: View, request: QueryRequest, query_vectors: Sequence[np.ndarray] | None, results: list[list[SearchHit]],
                   analyses: Sequence[QueryAnalysis] | None) -> list[list[SearchHit]]:
    """`results` with each hit's regions, when `request.regions` asks for them (unchanged otherwise). `analyses`:
    each query's, as its hits' snippets were made (their matches on each page are read again, not worked out
    again; None: the index has no text)."""
    if not request.regions:
        return results
    answered = []
    for number, hits in enumerate(results):
        vectors = query_vectors[number] if query_vectors else None  # (none in text mode)
        analysis = analyses[number] if analyses else None
        pages = [(hit.path, hit.page) for hit in hits]
        visual = visual_regions(view, vectors, request.queries[number], pages) if vectors is not None else [[] for _ in hits]
        answered.append([hit.changed(regions=tuple((text_regions(view, analysis, hit.path, hit.page) + found)[:MAX_REGIONS]))
                         for hit, found in zip(hits, visual)])
    return answered


def page_regions(view: View, lexical: LexicalIndex | None, query: str, query_vectors: np.ndarray | None,
                 path: str, page: int) -> tuple[Region, ...]:
    """The regions of `query` on one page (`page` 1-based of the document at `path`): its text regions,
    then its visual regions when the query's vectors are given (None: a text query, no model)."""
    found = text_regions(view, QueryAnalysis(lexical, query) if lexical is not None else None, path, page)
    if query_vectors is not None:
        found += visual_regions(view, query_vectors, query, [(path, page)])[0]
    return tuple(found[:MAX_REGIONS])


def text_regions(view: View, analysis: QueryAnalysis | None, path: str, page: int) -> list[Region]:
    """The boxes of the lines holding the query's matched terms, best first (index/text/regions.py); none where
    the index has no text, or no word positions for the page (an index from before them: `lgpt-index upgrade`)."""
    document, positions = view.document(path), view.artifact(WORDS)
    if analysis is None or document is None or not isinstance(positions, WordPositions):
        return []
    words = positions.page(document, page)
    matches = analysis.page(path, page) if words is not None else None
    if words is None or matches is None:
        return []
    return page_text_regions(matches, words)


def visual_regions(view: View, query_vectors: np.ndarray, query: str, pages: Sequence[tuple[str, int]]) -> list[list[Region]]:
    """For each page (a document's path, a 1-based page), the query tokens' best patches on it, clustered into
    boxes, best first (models/geometry.py): none where the index's family declares no patch geometry
    (query/patches.no_visual_regions says why). The pages' vectors are read in one call."""
    found: list[list[Region]] = [[] for _ in pages]
    geometry = patch_geometry(view)
    if geometry is None or not pages:
        return found
    wanted: list[tuple[int, Document, int, tuple[int, int] | None]] = []
    for number, (path, page) in enumerate(pages):
        doc = view.document(path)
        if doc is None or not 1 <= page <= doc.pages:
            continue
        size = page_pixels(view, doc, page) if geometry.needs_page_size else None
        if size is not None or not geometry.needs_page_size:
            wanted.append((number, doc, page, size))
    if not wanted:
        return found
    read = view.page_vectors(pages_of([(doc, page) for _, doc, page, _ in wanted]))
    placed = [(number, layout, vectors) for (number, _, _, size), vectors in zip(wanted, read)
              if (layout := geometry.layout(len(vectors), size)) is not None]
    regions = clustered([layout for _, layout, _ in placed], [vectors for _, _, vectors in placed], query_vectors,
                        geometry.query_tokens(query, len(query_vectors)))
    for (number, _, _), own in zip(placed, regions):
        found[number] = own
    return found
