"""Text and hybrid queries over one generation: a lexical and a visual candidate list, fused.

The lexical list comes from the generation's full-text index (index/text), the visual one from
exact MaxSim; query/fusion.py fuses them.

The two lists are independent: each is its engine's top N (DEPTH) among the documents the
filters keep, so text finds a page the vision model missed, and the reverse. Text mode needs no
model at all. Every hit of an index with text carries a snippet; `with_text`, the page's text.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ..core.errors import IndexProblem
from ..core.failpoints import failpoint
from ..core.metadata import matches
from ..core.types import Mode, SearchHit
from ..index.protocols import View
from ..index.text.engine import LexicalIndex, TextHit
from ..index.text.lexicon import QueryAnalysis
from ..index.text.snippet import snippet
from .copies import Copies
from .fusion import PagePrior, fuse
from .request import QueryRequest

DEPTH: Final = 100  # candidates taken from each list before fusion
PROBES: Final = 16  # questions drawn from the index's own pages to learn the visual list's prior (fusion.PagePrior)
PROBE_WORDS: Final = 8

Key = tuple[str, int]  # a page: its document's path and its page number


def probe_questions(view: View, lexical: LexicalIndex, count: int = PROBES) -> list[tuple[str, Key]]:
    """Up to `count` questions, each PROBE_WORDS words from the middle of a page's text, from pages
    spread evenly over the index (deterministic), with the page each was drawn from."""
    pages = [(doc.path, page) for doc in view.documents for page in range(1, doc.pages + 1)]
    found: list[tuple[str, Key]] = []
    step = max(1, len(pages) // (count * 2))
    for key in pages[::step]:
        words = (lexical.page_text(*key) or "").split()
        if len(words) >= PROBE_WORDS:
            middle = (len(words) - PROBE_WORDS) // 2
            found.append((" ".join(words[middle : middle + PROBE_WORDS]), key))
        if len(found) == count:
            break
    return found


def visual_prior(questions: Sequence[tuple[str, Key]], encode: Callable[[Sequence[str]], Sequence[np.ndarray]],
                 search: Callable[[Sequence[np.ndarray], int], Sequence[list[SearchHit]]]) -> PagePrior[Key] | None:
    """The visual list's PagePrior on this generation: the probe questions encoded and ranked (DEPTH pages each)."""
    if len(questions) < 3:
        return None
    lists = search(encode([text for text, _ in questions]), DEPTH)
    return PagePrior.learn([([((hit.path, hit.page), hit.score) for hit in hits], source)
                            for hits, (_, source) in zip(lists, questions)])


def load_prior(path: Path) -> PagePrior[Key] | None:
    """A visual prior saved by save_prior; None where there is none, or it cannot be read."""
    try:
        saved = json.loads(path.read_text())
        pages = {(str(doc), int(page)): (float(usual), float(spread)) for doc, page, usual, spread in saved["pages"]}
        return PagePrior({key: usual for key, (usual, _) in pages.items()}, {key: spread for key, (_, spread) in pages.items()},
                         float(saved["unseen"]), float(saved["null"]), float(saved["room"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_prior(path: Path, prior: PagePrior[Key]) -> None:
    """Keep `prior` for the next process (written whole or not at all; a cache: a failure is no error)."""
    pages = [[doc, page, usual, prior.spread[(doc, page)]] for (doc, page), usual in prior.usual.items()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            json.dump({"pages": pages, "unseen": prior.unseen, "null": prior.null, "room": prior.room}, out)
        os.replace(out.name, path)
    except OSError:
        pass


def choose_mode(asked: Mode | None, lexical: LexicalIndex | None, location: str) -> Mode:
    """The mode that answers: the one asked, or the default (hybrid when the index has page text,
    visual otherwise); text and hybrid need the index's text."""
    if asked is None:
        return "hybrid" if lexical is not None and lexical.has_pages() else "visual"
    if asked != "visual" and lexical is None:
        raise IndexProblem(f"{location} holds no page text, so --mode {asked} cannot answer.",
                           hint="Query with --mode visual, or rebuild the index with page text: `lgpt-index build DOCS --rebuild "
                                "--text auto` (an index built with --text never keeps it without --text auto).")
    return asked


def visual_depth(mode: Mode, k: int, copies: Copies | None = None) -> int:
    """How many pages the visual list must hold (deeper by the copies' places, where they are collapsed)."""
    depth = max(k, DEPTH) if mode == "hybrid" else k
    return depth + (copies.extra(depth) if copies is not None else 0)


def answer(view: View, lexical: LexicalIndex | None, request: QueryRequest, visual: Sequence[list[SearchHit]] | None,
           mode: Mode, analyses: Sequence[QueryAnalysis] | None, copies: Copies | None = None,
           prior: PagePrior[Key] | None = None) -> list[list[SearchHit]]:
    """The top-k of each query in `mode`, from its visual list (already ranked; None in text mode)
    and the text list asked here; `analyses`: each query's (None: the index has no text), whose matches on a
    hit's page make its snippet; with `copies`, the pages of byte-identical documents as one hit each;
    `prior`: the visual list's (visual_prior), for the weighted fusion."""
    failpoint(f"query.{mode}")  # query.text, query.hybrid, query.visual: tests hold a query of one mode here
    texts, k, filters = request.queries, request.k, request.filtered

    def top(hits: Sequence[SearchHit]) -> list[SearchHit]:
        return copies.collapse(hits, k, filters) if copies is not None else list(hits[:k])

    if mode == "visual":  # the vision model's answer: page text and snippets only when asked for
        assert visual is not None
        if not request.with_text:
            return [top(hits) for hits in visual]
        return [[_with_text(hit, analyses[number] if analyses else None, True) for hit in top(hits)] for number, hits in enumerate(visual)]
    assert lexical is not None
    paths = None if not filters else {doc.path for doc in view.documents if matches(doc.metadata, filters)}
    depth = visual_depth(mode, k, copies)  # the text list as deep as the visual one
    from_store = view.text_search(list(texts), depth, filters)  # the store's own lists (Qdrant's sparse vectors), or None
    results = []
    for number, text in enumerate(texts):
        lexical_hits = from_store[number] if from_store is not None else lexical.search(text, depth, paths)
        if mode == "text":
            hits = [_text_hit(view, rank, hit) for rank, hit in enumerate(lexical_hits, 1)]
        else:
            assert visual is not None
            unmatched = max(0, min(depth, view.page_count) - len(lexical_hits))  # pages no word of the query is on
            hits = _fused(view, lexical_hits, visual[number], request, k + (copies.extra(k) if copies is not None else 0), prior,
                          unmatched)
        kept = top([hit for hit in hits if hit is not None])
        results.append([_with_text(hit.changed(rank=rank), analyses[number] if analyses else None, request.with_text)
                        for rank, hit in enumerate(kept, 1)])
    return results


def _text_hit(view: View, rank: int, hit: TextHit) -> SearchHit | None:
    doc = view.document(hit.path)
    if doc is None:  # the text index and the vectors are of one generation: not expected
        return None
    return SearchHit(rank, hit.score, doc.path, hit.page, doc.sha256, doc.kind, dict(doc.metadata))


def _fused(view: View, lexical_hits: list[TextHit], visual_hits: list[SearchHit], request: QueryRequest,
           limit: int, prior: PagePrior[Key] | None, unmatched: int) -> list[SearchHit | None]:
    by_key = {(hit.path, hit.page): hit for hit in visual_hits}
    text_scores = {(hit.path, hit.page): hit.score for hit in lexical_hits}
    lists = {"text": [((hit.path, hit.page), hit.score) for hit in lexical_hits],
             "visual": [((hit.path, hit.page), hit.score) for hit in visual_hits]}
    hits: list[SearchHit | None] = []
    priors = {"visual": prior} if prior is not None else None
    for rank, item in enumerate(fuse(lists, request.fusion, request.rrf_k, priors, {"text": unmatched})[:limit], 1):
        path, page = item.key
        base = by_key.get(item.key) or _text_hit(view, rank, TextHit(path, page, 0.0))
        if base is None:
            hits.append(None)
            continue
        visual = by_key.get(item.key)
        hits.append(base.changed(rank=rank, score=item.score, fused=True, visual_rank=item.ranks["visual"],
                                 text_rank=item.ranks["text"], visual_score=visual.score if visual else None,
                                 text_score=text_scores.get(item.key)))
    return hits


def _with_text(hit: SearchHit, analysis: QueryAnalysis | None, with_text: bool) -> SearchHit:
    """`hit` with its snippet (and its page's text, `with_text`), from its query's matches on the page."""
    matches = analysis.page(hit.path, hit.page) if analysis is not None else None
    if matches is None:
        return hit
    failpoint("query.snippet")  # tests hold a query here, past its text list (a page that floods it with matches)
    return hit.changed(snippet=snippet(matches), text=matches.lexicon.text if with_text else None)
