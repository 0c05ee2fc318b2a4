"""Where on the page: regions for the returned hits, from the page's words and from the patches.

A text region is a box of the words holding the query's terms under the index's analysis
(index/text/regions.py, from the word positions stored with the page text); a visual region is a
cluster of the patches each query token matched best (the MaxSim argmax), mapped to the page through
the family's patch geometry (models/geometry.py). Only the top k are given regions, from vectors read
for them alone, so a query that does not ask for regions pays nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from ..core.errors import DocumentError, LgptError
from ..core.sizes import RenderSize
from ..core.types import Region, SearchHit
from ..index.format.manifest import Document, Span
from ..index.protocols import View
from ..index.text.engine import LexicalIndex
from ..ingest.discover import IMAGE, PDF
from ..ingest.render import PDF_DPI, read_pdf_pages
from ..models.families import find_family
from ..models.geometry import PatchGeometry, PatchLayout
from ..models.render_size import expected_render_size
from ..models.resolve import resolve_recorded
from .request import QueryRequest

MAX_REGIONS = 8  # regions per hit: the text ones first, then the visual ones
VISUAL_REGIONS = 3  # visual regions per hit at most
HOT = 0.25  # a patch is part of a visual region with at least this share of the hottest patch's weight


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
    """The boxes of the lines holding the query's matched terms, best first (index/text/regions.py)."""
    return []  # issue 44: the word positions stored with the page text (helper "text regions")


def visual_regions(view: View, query_vectors: np.ndarray, query: str, path: str, page: int) -> list[Region]:
    """The query tokens' best patches on the page, clustered into boxes, best first (models/geometry.py):
    none where the index's family declares no patch geometry (no_visual_regions says why)."""
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


def one_page(doc: Document, page: int) -> Document:
    """`doc` narrowed to its page `page` (1-based), so that page_vectors reads (and checks) that page alone."""
    before = 0
    for span in doc.spans:
        if page <= before + span.pages:
            return doc.model_copy(update={"pages": 1, "spans": [Span(segment=span.segment, first=span.first + page - 1 - before,
                                                                     pages=1)]})
        before += span.pages
    raise ValueError(f"{doc.path} has no page {page}")


def clustered(layout: PatchLayout, page_vectors: np.ndarray, query_vectors: np.ndarray,
              tokens: Sequence[str | None]) -> list[Region]:
    """Each asker's token's best patch (the MaxSim argmax over the image tokens), weighted by its score;
    the patches holding at least HOT of the hottest one's weight, adjacent ones merged into a box; each
    box scored by its share of all the weight, best first."""
    asked = [row for row, token in enumerate(tokens) if token is not None]
    if not asked or not len(layout.rows):
        return []
    scores = np.asarray(query_vectors, dtype=np.float32)[asked] @ np.asarray(page_vectors, dtype=np.float32)[layout.rows].T
    best = scores.argmax(axis=1)
    weight = np.maximum(scores[np.arange(len(asked)), best], 0.0)
    heat = np.bincount(best, weights=weight, minlength=len(layout.rows))
    total = float(heat.sum())
    if total <= 0:
        return []
    hot = np.flatnonzero(heat >= HOT * heat.max())
    regions = []
    for group in _touching(layout.boxes[hot]):
        members = hot[group]
        boxes = layout.boxes[members]
        bbox = (float(boxes[:, 0].min()), float(boxes[:, 1].min()), float(boxes[:, 2].max()), float(boxes[:, 3].max()))
        matched = tuple(dict.fromkeys(str(tokens[asked[t]]) for t in np.flatnonzero(np.isin(best, members) & (weight > 0))))
        regions.append(Region(bbox, "visual", round(float(heat[members].sum()) / total, 4), matched))
    return sorted(regions, key=lambda region: -region.score)[:VISUAL_REGIONS]


def _touching(boxes: np.ndarray) -> list[list[int]]:
    """The groups of boxes that touch or overlap, directly or through others (a union-find)."""
    parent = list(range(len(boxes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    near = 1e-6
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i], boxes[j]
            if a[0] <= b[2] + near and b[0] <= a[2] + near and a[1] <= b[3] + near and b[1] <= a[3] + near:
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(boxes)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def patch_geometry(view: View) -> PatchGeometry | None:
    """The patch geometry of the index's model at its render size; None: no visual regions (no_visual_regions)."""
    model, settings = view.manifest.model, view.manifest.settings
    if settings.pool_factor > 1:
        return None
    size = tuple(settings.render_size) if settings.render_size else None
    return _geometry(model.family, model.id, model.path, model.revision, size, settings.max_visual_tokens)


def no_visual_regions(view: View) -> str | None:
    """Why this index's hits have no visual regions whatever is asked (None: they may have some)."""
    family = find_family(view.manifest.model.family)
    if view.manifest.settings.pool_factor > 1:
        return "its pages' vectors are pooled (--pool-factor): no vector is a patch of the page any more"
    if family is None or family.patches is None:
        return f"its model family ({view.manifest.model.family}) declares no patch geometry"
    if patch_geometry(view) is None:
        return "its model's patches cannot be placed on the page (its checkpoint is not here, or its settings say none)"
    return None


@lru_cache(maxsize=8)
def _geometry(family_name: str, model_id: str, path: str | None, revision: str | None, size: tuple[int, ...] | None,
              max_visual_tokens: int | None) -> PatchGeometry | None:
    """A family's geometry, once per model and render size (a real family's keeps its processor's probes)."""
    family = find_family(family_name)
    if family is None or family.patches is None:
        return None
    try:
        model = resolve_recorded(model_id, path, revision, allow_download=False)
    except (LgptError, OSError, ValueError):
        return None
    render: RenderSize = (size if len(size) == 2 else size[0]) if size else expected_render_size(model, max_visual_tokens)
    return family.patch_geometry(model, render)


def page_pixels(view: View, doc: Document, page: int) -> tuple[int, int] | None:
    """A page's size in pixels as the build rendered it before fitting it to the model (a PDF page at
    PDF_DPI, an image's frame as it is); None where its source cannot be read."""
    try:
        if doc.pdf or doc.kind == PDF:
            pdf = view.store.pdf_file(doc.pdf) if doc.pdf else Path(doc.path)
            width, height, _ = read_pdf_pages(pdf, points=True).points[page - 1]
            return math.ceil(width * PDF_DPI / 72.0), math.ceil(height * PDF_DPI / 72.0)
        if doc.kind == IMAGE:
            with Image.open(doc.path) as image:
                image.seek(page - 1)
                return image.size
    except (DocumentError, LgptError, OSError, ValueError, EOFError, IndexError):
        return None
    return None
