"""The measures, computed by ir-measures with trec_eval's definitions.

nDCG and recall go through pytrec_eval (trec_eval's own code), MRR@10 through its MS MARCO evaluator
(docs/eval.md):

- nDCG@k: linear gain (the grade), discount log2(rank + 1), ideal ranking from every judged page;
- recall@k: relevant pages (grade >= 1) in the top k, over all relevant pages;
- MRR@10: 1 / the rank of the first relevant page in the top 10, 0 if none;
- the mean over every query of the set (a query with no results scores 0).

The evaluator sees the ranking as the query layer made it: each page's score is derived from its
rank (DEPTH + 1 - rank), so trec_eval's tie-break (by page id) never reorders equal scores."""

from __future__ import annotations

from typing import Mapping, Sequence

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
