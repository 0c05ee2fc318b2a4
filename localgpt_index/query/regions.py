"""Where on the page: regions for the returned hits, from the page's words and from the patches.

A text region is a box of the words holding the query's terms under the index's analysis
(index/text/regions.py, from the word positions stored with the page text); a visual region is a
cluster of the patches each query token matched best (the MaxSim argmax), mapped to the page through
the family's patch geometry (models/geometry.py). Only the top k are given regions, from vectors read
for them alone, so a query that does not ask for regions pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..core.types import Region, SearchHit
from ..index.protocols import View
from ..index.text.engine import LexicalIndex
from ..index.text.regions import page_text_regions
from ..index.text.words import WORDS, WordPositions
from .patches import clustered, one_page, page_pixels, patch_geometry
from .request import QueryRequest

MAX_REGIONS = 8  # regions per hit: the text ones first, then the visual ones


def attach_regions(view: View, lexical: LexicalIndex | None, request: QueryRequest,
                   query_vectors: Sequence[np.ndarray] | None, results: list[list[SearchHit]]) -> list[list[SearchHit]]:
    """`results` with each hit's regions, when `request.regions` asks for them (unchanged otherwise)."""
    if not request.regions:
        return results
    answered = []
    for number, hits in enumerate(results):
        vectors = query_vectors[number] if query_vectors else None  # (none in text mode)
        answered.append([replace(hit, regions=page_regions(view, lexical, request.queries[number], vectors, hit.path, hit.page))
                         for hit in hits])
    return answered


def page_regions(view: View, lexical: LexicalIndex | None, query: str, query_vectors: np.ndarray | None,
                 path: str, page: int) -> tuple[Region, ...]:
    """The regions of `query` on one page (`page` 1-based of the document at `path`): its text regions,
    then its visual regions when the query's vectors are given (None: a text query, no model)."""
    found = list(text_regions(view, lexical, query, path, page))
    if query_vectors is not None:
        found += visual_regions(view, query_vectors, query, path, page)
    return tuple(found[:MAX_REGIONS])


def text_regions(view: View, lexical: LexicalIndex | None, query: str, path: str, page: int) -> list[Region]:
    """The boxes of the lines holding the query's matched terms, best first (index/text/regions.py); none where
    the index has no text, or no word positions for the page (an index from before them: `lgpt-index upgrade`)."""
    document, positions = view.document(path), view.artifact(WORDS)
    if lexical is None or document is None or not isinstance(positions, WordPositions):
        return []
    words = positions.page(document, page)
    text = lexical.page_text(path, page) if words is not None else None
    if words is None or not text:
        return []
    return page_text_regions(text, words, lexical.parse(query), lexical.language(path))


def visual_regions(view: View, query_vectors: np.ndarray, query: str, path: str, page: int) -> list[Region]:
    """The query tokens' best patches on the page, clustered into boxes, best first (models/geometry.py):
    none where the index's family declares no patch geometry (query/patches.no_visual_regions says why)."""
    doc = view.document(path)
    geometry = patch_geometry(view)
    if doc is None or geometry is None or not 1 <= page <= doc.pages:
        return []
    size = page_pixels(view, doc, page) if geometry.needs_page_size else None
    if geometry.needs_page_size and size is None:
        return []
    vectors = view.page_vectors(one_page(doc, page))[0]
    layout = geometry.layout(len(vectors), size)
    if layout is None:
        return []
    return clustered(layout, vectors, query_vectors, geometry.query_tokens(query, len(query_vectors)))
