"""`eval`: a query set's queries asked of an existing index in each mode and variant, the rankings scored
against the judgments (measures.py). It never builds or changes an index."""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..core.errors import UsageError
from ..core.types import SearchHit
from .matching import Judged, judge, page_id
from .measures import DEPTH, compute
from .modes import Variant, check_modes, search
from .queryset import QuerySet
from .results import EVAL_SCHEMA_VERSION, EvalDocument, QueryDetail, RetrievedPage, Run, Unanswerable

NO_GROUP = "(none)"  # the group of queries without the --group-by key


def prepare(index: Any, query_set: QuerySet, chosen: Sequence[Variant]) -> Judged:
    """What can be refused before a model is loaded: a mode the index cannot answer, an ambiguous path."""
    check_modes(index, chosen)
    return judge(query_set.queries, index.documents)


def evaluate(index: Any, query_set: QuerySet, chosen: Sequence[Variant], judged: Judged | None = None,
             per_query: bool = False, depth: int = DEPTH, group_by: str | None = None) -> EvalDocument:
    """Every variant's measures over the query set (index: a query.search.Searcher; it loads the index's
    model when no encoder was loaded); with `group_by`, also per value of that key of the queries."""
    judged = judged or prepare(index, query_set, chosen)
    texts = [q.text for q in query_set.queries]
    runs = []
    for variant in chosen:
        started = time.perf_counter()
        results = search(index, texts, variant, depth)
        seconds = time.perf_counter() - started
        runs.append(_run(variant, query_set, judged, results, seconds, per_query, index.documents, group_by))
    manifest = index.manifest
    return EvalDocument(
        version=EVAL_SCHEMA_VERSION, index=str(index.store.location), model=manifest.model.id,
        pool_factor=manifest.settings.pool_factor, query_set=query_set.source, format=query_set.format,
        queries=len(query_set.queries), judged_pages=sum(1 for q in query_set.queries for j in q.relevant if j.grade >= 1),
        depth=depth, unanswerable=[Unanswerable(**vars(u)) for u in judged.unanswerable], notes=list(query_set.notes),
        runs=runs,
    )


def _run(variant: Variant, query_set: QuerySet, judged: Judged, results: list[list[SearchHit]], seconds: float,
         per_query: bool, documents: Sequence[Any], group_by: str | None) -> Run:
    numbers = {doc.path: number for number, doc in enumerate(documents)}
    ranked = {q.id: [page_id(numbers.get(hit.path, -1), hit.page) for hit in hits] for q, hits in zip(query_set.queries, results)}
    mean, each = compute(judged.qrels, ranked)
    fields: dict[str, Any] = {"mode": variant.mode, "first_pass": variant.first_pass, "fusion": variant.fusion, "measures": mean,
                              "seconds": round(seconds, 3)}
    if per_query:
        fields["per_query"] = [_detail(q, each[q.id], hits, ranked[q.id], judged.qrels[q.id])
                               for q, hits in zip(query_set.queries, results)]
    if group_by:
        fields["groups"] = _groups(query_set, judged, ranked, group_by)
    return Run.model_validate(fields)


def _groups(query_set: QuerySet, judged: Judged, ranked: dict[str, list[str]], key: str) -> dict[str, dict]:
    """Each value of `key`: its queries' count and mean measures (ir-measures over that subset)."""
    members: dict[str, list[str]] = {}
    for query in query_set.queries:
        members.setdefault(query.tags.get(key, NO_GROUP), []).append(query.id)
    return {value: {"queries": len(ids), "measures": compute({q: judged.qrels[q] for q in ids}, ranked)[0]}
            for value, ids in members.items()}


def check_group_key(query_set: QuerySet, key: str) -> None:
    """--group-by names a key some query has."""
    if not any(key in query.tags for query in query_set.queries):
        found = sorted({k for query in query_set.queries for k in query.tags})
        raise UsageError(f"--group-by {key}: no query of {query_set.source} has it"
                         + (f" (their keys: {', '.join(found)})." if found else "; its queries have no keys besides the format's."))


def _detail(query, measures: dict[str, float], hits: list[SearchHit], ranked: list[str], grades: dict[str, int]) -> QueryDetail:
    first = next((rank for rank, ident in enumerate(ranked, 1) if grades.get(ident, 0) >= 1), None)
    top = [RetrievedPage(rank=hit.rank, path=hit.path, page=hit.page, grade=grades.get(ident, 0))
           for hit, ident in zip(hits[:10], ranked)]
    return QueryDetail.model_validate({"id": query.id, "query": query.text, "measures": measures, "first_relevant": first, "top": top})
