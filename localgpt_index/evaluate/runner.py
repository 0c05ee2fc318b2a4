"""`eval`: a query set's queries asked of an existing index in each mode and variant, the rankings scored
against the judgments (measures.py). It never builds or changes an index."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..core.errors import UsageError
from ..core.types import SearchHit
from .matching import Judged, judge, page_id
from .measures import DEPTH, compute
from .queryset import QuerySet
from .results import EVAL_SCHEMA_VERSION, EvalDocument, QueryDetail, RetrievedPage, Run, Unanswerable

MODES = ("visual", "text", "hybrid")


@dataclass(frozen=True)
class Variant:
    mode: str
    first_pass: int | None = None  # pages a first pass keeps for exact scoring; None: exact

    @property
    def label(self) -> str:
        return self.mode + (f", first pass {self.first_pass}" if self.first_pass else "")


def parse_modes(text: str) -> list[str]:
    """`visual,text,hybrid` -> the modes in the order given, each once; an unknown name is a UsageError."""
    modes = list(dict.fromkeys(m.strip().lower() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise UsageError(f"--modes {text!r}: {'unknown mode ' + repr(unknown[0]) if unknown else 'no mode'}; "
                         f"choose from {', '.join(MODES)} (comma-separated).")
    return modes


def variants(modes: Sequence[str], first_passes: Sequence[int]) -> list[Variant]:
    """Each mode exact, then with each first pass; text mode has no first pass (it reads no vectors)."""
    found = []
    for mode in modes:
        found.append(Variant(mode))
        found += [Variant(mode, n) for n in dict.fromkeys(first_passes) if mode != "text"]
    if first_passes and all(v.first_pass is None for v in found):
        raise UsageError("--first-pass narrows the visual list: it applies to the visual and hybrid modes, not text.")
    return found


def search(index: Any, texts: list[str], variant: Variant, depth: int) -> list[list[SearchHit]]:
    """The query layer's ranking of `texts` in `variant`'s mode. A query layer that takes no mode
    answers visually only; any other mode is refused with a message naming it."""
    if "mode" not in inspect.signature(index.search).parameters:
        check_modes(index, [variant])
        return index.search(texts, k=depth, candidates=variant.first_pass)
    return index.search(texts, k=depth, candidates=variant.first_pass, mode=variant.mode)


def check_modes(index: Any, chosen: Sequence[Variant]) -> None:
    """Refuse, before any query is asked, a mode the query layer cannot answer."""
    takes_mode = "mode" in inspect.signature(index.search).parameters
    refused = list(dict.fromkeys(v.mode for v in chosen if v.mode != "visual" and not takes_mode))
    if refused:
        raise UsageError(f"--modes {','.join(refused)}: this index answers visual queries only.",
                         hint="Evaluate with --modes visual.")


def prepare(index: Any, query_set: QuerySet, chosen: Sequence[Variant]) -> Judged:
    """What can be refused before a model is loaded: a mode the index cannot answer, an ambiguous path."""
    check_modes(index, chosen)
    return judge(query_set.queries, index.documents)


def evaluate(index: Any, query_set: QuerySet, chosen: Sequence[Variant], judged: Judged | None = None,
             per_query: bool = False, depth: int = DEPTH) -> EvalDocument:
    """Every variant's measures over the query set (index: a query.search.Index; it loads the index's
    model when no encoder was loaded)."""
    judged = judged or prepare(index, query_set, chosen)
    texts = [q.text for q in query_set.queries]
    runs = []
    for variant in chosen:
        started = time.perf_counter()
        results = search(index, texts, variant, depth)
        seconds = time.perf_counter() - started
        runs.append(_run(variant, query_set, judged, results, seconds, per_query, index.documents))
    manifest = index.manifest
    return EvalDocument(
        version=EVAL_SCHEMA_VERSION, index=str(index.store.location), model=manifest.model.id,
        pool_factor=manifest.settings.pool_factor, query_set=query_set.source, format=query_set.format,
        queries=len(query_set.queries), judged_pages=sum(1 for q in query_set.queries for j in q.relevant if j.grade >= 1),
        depth=depth, unanswerable=[Unanswerable(**vars(u)) for u in judged.unanswerable], notes=list(query_set.notes),
        runs=runs,
    )


def _run(variant: Variant, query_set: QuerySet, judged: Judged, results: list[list[SearchHit]], seconds: float,
         per_query: bool, documents: Sequence[Any]) -> Run:
    numbers = {doc.path: number for number, doc in enumerate(documents)}
    ranked = {q.id: [page_id(numbers.get(hit.path, -1), hit.page) for hit in hits] for q, hits in zip(query_set.queries, results)}
    mean, each = compute(judged.qrels, ranked)
    fields: dict[str, Any] = {"mode": variant.mode, "first_pass": variant.first_pass, "measures": mean, "seconds": round(seconds, 3)}
    if per_query:
        fields["per_query"] = [_detail(q, each[q.id], hits, ranked[q.id], judged.qrels[q.id])
                               for q, hits in zip(query_set.queries, results)]
    return Run.model_validate(fields)


def _detail(query, measures: dict[str, float], hits: list[SearchHit], ranked: list[str], grades: dict[str, int]) -> QueryDetail:
    first = next((rank for rank, ident in enumerate(ranked, 1) if grades.get(ident, 0) >= 1), None)
    top = [RetrievedPage(rank=hit.rank, path=hit.path, page=hit.page, grade=grades.get(ident, 0))
           for hit, ident in zip(hits[:10], ranked)]
    return QueryDetail.model_validate({"id": query.id, "query": query.text, "measures": measures, "first_relevant": first, "top": top})
