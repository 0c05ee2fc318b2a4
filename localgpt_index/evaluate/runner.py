"""`eval`: a query set asked of an existing index in each mode and variant, the rankings scored.

The rankings are scored against the judgments; it never builds or changes an index. The measures
are computed by ir-measures (nDCG and recall through pytrec_eval, trec_eval's own code; MRR@10
through its MS MARCO evaluator), with trec_eval's definitions (docs/eval.md):

- nDCG@k: linear gain (the grade), discount log2(rank + 1), ideal ranking from every judged page;
- recall@k: relevant pages (grade >= 1) in the top k, over all relevant pages;
- MRR@10: 1 / the rank of the first relevant page in the top 10, 0 if none;
- the mean over every query of the set (a query with no results scores 0).

The evaluator sees the ranking as the query layer made it: each page's score is derived from its
rank (DEPTH + 1 - rank), so trec_eval's tie-break (by page id) never reorders equal scores."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from ..core.errors import UsageError
from ..core.types import SearchHit
from .matching import Judged, content_numbers, judge, page_id
from .modes import Variant, check_modes, search
from .queryset import QuerySet
from .results import EVAL_SCHEMA_VERSION, EvalDocument, QueryDetail, RetrievedPage, Run

DEPTH = 100  # pages asked for per query: the deepest cutoff (recall@100)

# the names in lgpt-index's documents -> ir-measures' measure names
MEASURES: dict[str, str] = {
    "ndcg@1": "nDCG@1", "ndcg@5": "nDCG@5", "ndcg@10": "nDCG@10",
    "recall@1": "R@1", "recall@5": "R@5", "recall@10": "R@10", "recall@100": "R@100",
    "mrr@10": "RR@10",
}


def run_scores(ranked: Sequence[str], depth: int = DEPTH) -> dict[str, float]:
    """A ranking as the evaluator reads it: strictly decreasing scores in rank order."""
    return {ident: float(depth + 1 - rank) for rank, ident in enumerate(ranked, 1)}


Values = dict[str, float]  # measure name -> value


def compute(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Sequence[str]]) -> tuple[Values, dict[str, Values]]:
    """The mean of every measure over the queries of `qrels`, and each query's values; `run` holds each
    query's ranked page ids (a query without any counts as retrieving nothing)."""
    import ir_measures

    by_name = {ir_measures.parse_measure(name): ours for ours, name in MEASURES.items()}
    evaluator = ir_measures.evaluator(list(by_name), {q: dict(grades) for q, grades in qrels.items()})
    scored = {query_id: run_scores(run.get(query_id, ())) for query_id in qrels}
    per_query: dict[str, dict[str, float]] = {query_id: {ours: 0.0 for ours in MEASURES} for query_id in qrels}
    for metric in evaluator.iter_calc(scored):
        per_query[metric.query_id][by_name[metric.measure]] = float(metric.value)
    aggregate = {by_name[measure]: float(value) for measure, value in evaluator.calc_aggregate(scored).items()}
    return {ours: aggregate.get(ours, 0.0) for ours in MEASURES}, per_query


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
        depth=depth, unanswerable=list(judged.unanswerable), notes=list(query_set.notes),
        runs=runs,
    )


def _run(variant: Variant, query_set: QuerySet, judged: Judged, results: list[list[SearchHit]], seconds: float,
         per_query: bool, documents: Sequence[Any], group_by: str | None) -> Run:
    numbers = {doc.path: number for doc, number in zip(documents, content_numbers(documents))}
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
