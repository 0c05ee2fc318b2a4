"""`lgpt-index eval`: measure how well an existing index answers a set of queries with graded relevant
pages (nDCG@1/5/10, recall@1/5/10/100, MRR@10 per mode and variant), computed by ir-measures with
trec_eval's definitions (docs/eval.md).

    sets      a query set from a path: queryset (the JSONL file, the types), beir (BEIR's layout)
    matching  which indexed page a judgment names
    measures  the measures, through ir-measures
    runner    the modes and variants asked of the index
    results   the `eval --json` document
"""
