"""Text and hybrid queries over one generation: a lexical and a visual candidate list, fused.

The lexical list comes from the generation's full-text index (index/text), the visual one from
exact MaxSim; query/fusion.py fuses them.

The two lists are independent: each is its engine's top N (DEPTH) among the documents the
filters keep, so text finds a page the vision model missed, and the reverse. Text mode needs no
model at all. Every hit of an index with text carries a snippet; `with_text`, the page's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from ..core.errors import IndexProblem, UsageError
from ..core.failpoints import failpoint
from ..core.metadata import matches
from ..core.types import SearchHit
from ..index.text.engine import LexicalIndex, TextHit
from ..index.text.snippet import snippet
from .fusion import METHODS, RRF_K, Method, fuse

Mode = Literal["hybrid", "visual", "text"]
MODES: Final = ("hybrid", "visual", "text")
DEPTH: Final = 100  # candidates taken from each list before fusion


@dataclass(frozen=True)
class QueryOptions:
    """How a query is answered. mode None: hybrid when the index has page text, visual otherwise."""

    mode: Mode | None = None
    fusion: Method = "weighted"
    rrf_k: int = RRF_K
    depth: int = DEPTH
    with_text: bool = False

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}: one of {', '.join(MODES)}.")
        if self.fusion not in METHODS:
            raise UsageError(f"unknown fusion {self.fusion!r}: one of {', '.join(METHODS)}.")
        if self.rrf_k < 0 or self.depth < 1:
            raise UsageError(f"--rrf-k must be >= 0 and the depth >= 1 (got {self.rrf_k}, {self.depth}).")


def choose_mode(options: QueryOptions, lexical: LexicalIndex | None, location: str) -> Mode:
    """The mode that answers: the one asked, or the default; text and hybrid need the index's text."""
    if options.mode is None:
        return "hybrid" if lexical is not None and lexical.has_pages() else "visual"
    if options.mode != "visual" and lexical is None:
        raise IndexProblem(f"{location} holds no page text, so --mode {options.mode} cannot answer.",
                           hint="Query with --mode visual, or rebuild the index with this version (build --rebuild) to add page text.")
    return options.mode


def visual_depth(mode: Mode, k: int, options: QueryOptions) -> int:
    """How many pages the visual list must hold."""
    return max(k, options.depth) if mode == "hybrid" else k


def answer(view, lexical: LexicalIndex | None, texts: Sequence[str], visual: Sequence[list[SearchHit]] | None,
           k: int, filters: dict[str, str] | None, mode: Mode, options: QueryOptions) -> list[list[SearchHit]]:
    """The top-k of each query in `mode`, from its visual list (already ranked; None in text mode)
    and the text list asked here."""
    failpoint(f"query.{mode}")  # query.text, query.hybrid, query.visual: tests hold a query of one mode here
    if mode == "visual":  # the vision model's answer: page text and snippets only when asked for
        assert visual is not None
        if not options.with_text:
            return [hits[:k] for hits in visual]
        return [[_with_text(hit, lexical, text, options) for hit in hits[:k]] for text, hits in zip(texts, visual)]
    assert lexical is not None
    paths = None if not filters else {doc.path for doc in view.documents if matches(doc.metadata, filters)}
    depth = k if mode == "text" else max(k, options.depth)
    from_store = _store_text_lists(view, list(texts), depth, filters)
    results = []
    for number, text in enumerate(texts):
        lexical_hits = from_store[number] if from_store is not None else lexical.search(text, depth, paths)
        if mode == "text":
            hits = [_text_hit(view, rank, hit) for rank, hit in enumerate(lexical_hits, 1)]
        else:
            assert visual is not None
            hits = _fused(view, lexical_hits, visual[number], k, options)
        kept = [hit for hit in hits if hit is not None][:k]
        results.append([_with_text(replace(hit, rank=rank), lexical, text, options) for rank, hit in enumerate(kept, 1)])
    return results


def _store_text_lists(view, texts: list[str], depth: int, filters: dict[str, str] | None) -> list[list[TextHit]] | None:
    """The text lists from the store itself where it has them (Qdrant's sparse vectors: the same tokens
    and BM25, index/qdrant/sparse.py); None: from the generation's FTS5 artifact."""
    search = getattr(view, "text_search", None)
    return search(texts, depth, filters) if search is not None else None


def _text_hit(view, rank: int, hit: TextHit) -> SearchHit | None:
    doc = view.document(hit.path)
    if doc is None:  # the text index and the vectors are of one generation: not expected
        return None
    return SearchHit(rank, hit.score, doc.path, hit.page, doc.sha256, doc.kind, dict(doc.metadata))


def _fused(view, lexical_hits: list[TextHit], visual_hits: list[SearchHit], k: int, options: QueryOptions) -> list[SearchHit | None]:
    by_key = {(hit.path, hit.page): hit for hit in visual_hits}
    text_scores = {(hit.path, hit.page): hit.score for hit in lexical_hits}
    lists = {"text": [((hit.path, hit.page), hit.score) for hit in lexical_hits],
             "visual": [((hit.path, hit.page), hit.score) for hit in visual_hits]}
    hits: list[SearchHit | None] = []
    for rank, item in enumerate(fuse(lists, options.fusion, options.rrf_k)[:k], 1):
        path, page = item.key  # type: ignore[misc]  # keys are (path, page) pairs, made above
        base = by_key.get(item.key) or _text_hit(view, rank, TextHit(path, page, 0.0))
        if base is None:
            hits.append(None)
            continue
        visual = by_key.get(item.key)
        hits.append(replace(base, rank=rank, score=item.score, fused=True, visual_rank=item.ranks["visual"],
                            text_rank=item.ranks["text"], visual_score=visual.score if visual else None,
                            text_score=text_scores.get(item.key)))
    return hits


def _with_text(hit: SearchHit, lexical: LexicalIndex | None, query: str, options: QueryOptions) -> SearchHit:
    if lexical is None:
        return hit
    page_text = lexical.page_text(hit.path, hit.page)
    if page_text is None:
        return hit
    return replace(hit, snippet=snippet(page_text, query), text=page_text if options.with_text else None)
