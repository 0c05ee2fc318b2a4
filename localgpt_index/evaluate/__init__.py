"""`lgpt-index eval`: how well an existing index answers a set of queries with graded relevant pages.

nDCG@1/5/10, recall@1/5/10/100 and MRR@10 per mode and variant, computed by ir-measures with
trec_eval's definitions (docs/eval.md).

    sets      a query set from a path: queryset (the JSONL file, the types), beir (BEIR's layout)
    matching  which indexed page a judgment names
    measures  the measures, through ir-measures
    modes     the variants compared (mode, first pass, fusion) and how the query layer is asked
    runner    the variants asked of the index, scored
    results   the `eval --json` document
"""
