"""`lgpt-index eval`: how well an existing index answers a set of queries with graded relevant pages.

nDCG@1/5/10, recall@1/5/10/100 and MRR@10 per mode and variant, computed by ir-measures with
trec_eval's definitions (docs/eval.md).

    queryset  a query set from a path: lgpt-index's JSONL file or BEIR's layout
    matching  which indexed page a judgment names
    modes     the variants compared (mode, first pass, fusion) and the query requests they make
    runner    the variants asked of the index, scored (the measures, through ir-measures)
    results   the `eval --json` document
"""
