"""Visual regions' parts: the index's patch geometry, a page's size and vectors, and the best patches clustered.

query/regions.visual_regions puts them together for each returned hit: the page's vectors (one page read,
from either store), where its image tokens lie (models/geometry.py, at the size the build rendered the page,
re-derived from its source), and each query token's best patch, weighted by its score, merged into boxes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from ..core.errors import DocumentError, LgptError
from ..core.sizes import RenderSize
from ..core.types import Region
from ..index.format.manifest import Document, Span
from ..index.protocols import View
from ..index.scoring.maxsim import best_rows
from ..ingest.discover import IMAGE, PDF
from ..ingest.render import PDF_DPI, PagePoints, read_pdf_pages
from ..models.families import find_family
from ..models.geometry import Neighbours, PatchGeometry, PatchLayout
from ..models.render_size import expected_render_size
from ..models.resolve import resolve_recorded

VISUAL_REGIONS = 3  # visual regions per hit at most
HOT = 0.25  # a patch is part of a visual region with at least this share of the hottest patch's weight


def pages_of(pages: Sequence[tuple[Document, int]]) -> Document:
    """Pages of documents (each 1-based) as one document of one-page spans, in order, so that page_vectors reads
    (and checks) those pages alone, in one call (one request to a Qdrant store for a query's hits)."""
    spans = [Span.model_construct(segment=segment, first=row, pages=1) for segment, row in (doc.locate(page) for doc, page in pages)]
    return pages[0][0].model_copy(update={"pages": len(spans), "spans": spans})


def clustered(layouts: Sequence[PatchLayout], pages: Sequence[np.ndarray], query_vectors: np.ndarray,
              tokens: Sequence[str | None]) -> list[list[Region]]:
    """For each page (its layout, its vectors): each asker's token's best patch (the MaxSim argmax over the image
    tokens), weighted by its score; the patches holding at least HOT of the hottest one's weight, adjacent ones
    merged into a box; each box scored by its share of all the weight, best first. The pages of one layout are
    scored together (a query's hits: one product, one argmax: index/scoring/maxsim.best_rows); past the scores, a
    page's few hot patches are plain Python lists, grouped by the layout's neighbours (PatchLayout.touching)."""
    found: list[list[Region]] = [[] for _ in pages]
    asked = [row for row, token in enumerate(tokens) if token is not None]
    if not asked:
        return found
    query, names = np.asarray(query_vectors[asked], dtype=np.float32), [str(tokens[row]) for row in asked]
    alike: dict[int, list[int]] = {}  # pages by layout (a family's layouts are kept per page size: one object each)
    for number, layout in enumerate(layouts):
        if len(layout.rows):
            alike.setdefault(id(layout), []).append(number)
    for numbers in alike.values():
        layout = layouts[numbers[0]]
        best, top = best_rows(query, [pages[n] for n in numbers], layout.rows)  # (pages, asked): one product for them all
        weight = np.maximum(top, 0.0)
        patches = len(layout.rows)
        heat = np.bincount((best + patches * np.arange(len(numbers))[:, None]).ravel(), weights=weight.ravel(),
                           minlength=patches * len(numbers)).reshape(len(numbers), patches)
        totals = heat.sum(axis=1).tolist()
        at_page, at_patch = np.nonzero(heat >= HOT * heat.max(axis=1, keepdims=True))  # the hot patches, page by page
        ends = np.searchsorted(at_page, np.arange(1, len(numbers) + 1)).tolist()
        hot_heat, hot_boxes, hot_patches = heat[at_page, at_patch].tolist(), layout.boxes[at_patch].tolist(), at_patch.tolist()
        bests, weighed = best.tolist(), (weight > 0).tolist()
        for at, (number, total) in enumerate(zip(numbers, totals)):
            if total > 0:
                hot = slice(ends[at - 1] if at else 0, ends[at])
                matching = [(name, patch) for name, patch, counts in zip(names, bests[at], weighed[at]) if counts]
                found[number] = _boxes(hot_boxes[hot], hot_heat[hot], hot_patches[hot], layout.touching, matching, total)
    return found


def _boxes(boxes: list[list[float]], heat: list[float], patches: list[int], touching: Neighbours,
           matching: list[tuple[str, int]], total: float) -> list[Region]:
    """A page's hot patches (their boxes, heat and numbers; `touching`: each patch's neighbours in the layout) merged
    into boxes where they touch, best first; `matching`: each asker's token with its best patch. Only the best
    VISUAL_REGIONS groups become regions."""
    groups = _touching(patches, touching)
    scores = [round((heat[group[0]] if len(group) == 1 else sum(heat[i] for i in group)) / total, 4) for group in groups]
    regions = []
    for at in sorted(range(len(groups)), key=lambda at: -scores[at])[:VISUAL_REGIONS]:  # (stable: equal ones in order)
        group = groups[at]
        if len(group) == 1:  # (most: a hot patch alone)
            x0, y0, x1, y1 = boxes[group[0]]
            held, bbox = {patches[group[0]]}, (x0, y0, x1, y1)
        else:
            held, members = {patches[i] for i in group}, [boxes[i] for i in group]
            bbox = (min(b[0] for b in members), min(b[1] for b in members), max(b[2] for b in members), max(b[3] for b in members))
        regions.append(Region(bbox, "visual", scores[at], tuple(dict.fromkeys([name for name, patch in matching if patch in held]))))
    return regions


def _touching(patches: list[int], touching: Neighbours) -> list[list[int]]:
    """The groups of `patches` (their positions in it) that touch, directly or through others (a union-find over
    the layout's neighbours), each in order, ordered by their first."""
    if len(patches) < 2:
        return [[0]] if patches else []
    at = {patch: i for i, patch in enumerate(patches)}
    pairs = [(i, at[other]) for i, patch in enumerate(patches) for other in touching[patch] if other in at]
    if not pairs:
        return [[i] for i in range(len(patches))]
    parent = list(range(len(patches)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(patches)):
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
            width, height, _ = _pdf_points(str(pdf), doc.pdf_sha256 or doc.sha256)[page - 1]
            return math.ceil(width * PDF_DPI / 72.0), math.ceil(height * PDF_DPI / 72.0)
        if doc.kind == IMAGE:
            with Image.open(doc.path) as image:
                image.seek(page - 1)
                return image.size
    except (DocumentError, LgptError, OSError, ValueError, EOFError, IndexError):
        return None
    return None


@lru_cache(maxsize=1024)
def _pdf_points(pdf: str, sha256: str) -> tuple[PagePoints, ...]:
    """Every page's size of a PDF (one pdfinfo a document, kept by its content's hash: about 30 ms a call
    from a process that holds a model)."""
    return read_pdf_pages(Path(pdf), points=True).points
