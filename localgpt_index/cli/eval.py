"""lgpt-index eval"""

from __future__ import annotations

import click

from .app import AppCommand, Application, output_options
from .defaults import TuningOption
from .formats import format_option
from .options import EXIT_CODES, INDEX_MODEL_HELP, display_path, index_options, model_options

# the columns of the table, in the order of the document's measures
HEADERS = {"ndcg@1": "nDCG@1", "ndcg@5": "nDCG@5", "ndcg@10": "nDCG@10", "recall@1": "R@1", "recall@5": "R@5",
           "recall@10": "R@10", "recall@100": "R@100", "mrr@10": "MRR@10"}


@click.command("eval", cls=AppCommand, epilog=EXIT_CODES)
@click.argument("queries", metavar="[QUERIES]", type=click.Path(dir_okay=True), required=False)
@click.option("--synthesize", type=click.IntRange(1), metavar="N", default=None,
              help="Instead of QUERIES: N known-item questions drawn from the index's own page text (a phrase found on one "
                   "page only, asked exact, unaccented, inflected or with words dropped; docs/eval.md says what they measure).")
@click.option("--against", type=click.Choice(["exact"]), default=None,
              help="Judge by exact search itself, no answers needed: each question's relevant pages are the exact visual "
                   "top 10, so recall@10 is how much of it a lossy setting (--first-pass N, the index's pool factor) keeps.")
@click.option("--reference", metavar="NAME", default=None,
              help="--against exact: judge by the exact search of the index NAME beside this one (in the same index "
                   "folder, of the same documents, e.g. built without --pool-factor): what this index's pooling keeps of "
                   "it. [default: this index]")
@click.option("--seed", type=int, default=0, show_default=True,
              help="--synthesize: which questions are drawn (the same seed, the same questions).")
@click.option("--modes", default=None, metavar="MODE[,MODE...]",
              help="How to answer, each evaluated: visual, text, hybrid (comma-separated; the index must answer each). "
                   "[default: query's: hybrid where the index has page text, else visual]")
@click.option("--first-pass", "first_passes", multiple=True, type=click.IntRange(1), metavar="N",
              help="Also evaluate with a first pass keeping N pages (query --first-pass; repeatable): what it costs in quality.")
@click.option("--fusions", default=None, metavar="NAME[,NAME...]",
              help="Hybrid mode: evaluate each of these fusions of the two lists (query --fusion). [default: the query's]")
@click.option("--split", cls=TuningOption, default="test", show_default=True, help="A BEIR folder's qrels split (qrels/SPLIT.tsv).")
@click.option("--per-query", is_flag=True, help="Each query's measures and first relevant rank too.")
@click.option("--group-by", default=None, metavar="KEY",
              help="Also the measures per value of KEY, a key of the query set's lines (the bundled set's: category).")
@model_options(INDEX_MODEL_HELP, everyday=False)
@index_options
@output_options
@format_option
@click.pass_obj
def eval_(app: Application, queries, synthesize, against, reference, seed, modes, first_passes, fusions, split, per_query, group_by,
          model_spec) -> None:
    """Measure how well the index answers QUERIES: a JSONL file of queries with graded relevant pages,
    or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/); or, with --synthesize N, questions drawn from
    the index's own text. Prints nDCG@1/5/10, recall@1/5/10/100 and MRR@10 for each mode and variant
    (trec_eval's definitions, docs/eval.md). The index is only read."""
    from ..core.errors import UsageError
    from ..evaluate.queryset import load_query_set
    from ..evaluate.modes import default_modes, parse_list, parse_modes, variants
    from ..evaluate.runner import check_group_key, evaluate, prepare
    from ..models.resolve import is_random_checkpoint
    from ..query.search import open_index
    from .formats import chosen_format, write

    fmt = chosen_format(app.output_format, app.as_json)
    if fmt == "paths":
        raise UsageError("--format paths: eval lists measures, not documents (jsonl, tsv and lines list its runs).")
    if reference is not None and not against:
        raise UsageError("--reference names the index whose exact search judges: it goes with --against exact.")
    if (queries is None) == (synthesize is None):
        raise UsageError("eval: give QUERIES (a query set) or --synthesize N (questions drawn from the index), one of them.")
    if modes is None:  # synthesized questions: the modes side by side; against exact: the visual list is what is cut
        modes = "visual" if against else "visual,text,hybrid" if synthesize is not None else None
    asked = parse_modes(modes) if modes is not None else None
    fused = parse_list(fusions, "--fusions") if fusions is not None else []
    if asked is not None:
        variants(asked, list(first_passes), fused)  # a combination that cannot be: a usage error before any work
    query_set = load_query_set(queries, split) if queries is not None else None  # a malformed set: refused before the index is read
    if group_by and query_set is not None:
        check_group_key(query_set, group_by)
    index = open_index(store=app.store())
    if query_set is None:
        query_set = _synthesized(app, index, synthesize, seed)
        if group_by:
            check_group_key(query_set, group_by)
    if against:
        from ..evaluate.synthesize import against_exact

        query_set = against_exact(_reference(app, reference) if reference else index, query_set, reference)
    for note in query_set.notes:
        app.terminal.info(note)
    chosen = variants(asked if asked is not None else default_modes(index), list(first_passes), fused)
    judged = prepare(index, query_set, chosen)
    if judged.unanswerable:
        first = judged.unanswerable[0]
        app.terminal.warn(f"{len(judged.unanswerable)} judged page(s) are not in the index and count as misses "
                          f"(first: {display_path(first.path)} page {first.page}: {first.reason}); "
                          "`lgpt-index ls --failed` shows documents that failed to build.")
    if any(variant.mode != "text" for variant in chosen):  # text mode reads no vectors: no model
        encoder = index.load_encoder(model_spec)
        if is_random_checkpoint(encoder.model.path):
            app.terminal.warn(f"{encoder.model.id} is a random-weight test checkpoint: these measures are not meaningful.")
    document = evaluate(index, query_set, chosen, judged, per_query=per_query, group_by=group_by).to_json()
    write(fmt, _listing(document), document, lambda: _print_tables(document), app.print_json)


def _reference(app: Application, name: str):
    """The index `name` in the same index folder (or Qdrant server) as the one evaluated, opened to judge it."""
    from ..index.open import open_store
    from ..query.search import open_index

    store = app.keep(open_store(app.store_url, app.index_dir_found()[0], name, app.qdrant_api_key, app.pdf_store))
    return open_index(store=store)


def _synthesized(app: Application, index, count: int, seed: int):
    """--synthesize: the questions drawn from the index's text, and what they measure said."""
    from ..core.errors import UsageError
    from ..evaluate.synthesize import ABOUT, synthesize

    query_set = synthesize(index, count, seed)
    app.terminal.info(ABOUT)
    if not query_set.queries:
        raise UsageError("--synthesize: the index holds no page text to draw questions from.")
    return query_set


def _listing(document: dict):
    """One record a run (mode and variant): lines `MODE[ FUSION][, first pass N]<TAB>nDCG@1=0.1234<TAB>...<TAB>s=1.2`;
    jsonl: the document's runs whole (with their groups and queries)."""
    from collections.abc import Callable
    from typing import Any

    from .formats import Listing, cell

    def line(run: dict) -> str:
        return "\t".join([_label(run), *(f"{HEADERS[m]}={cell(run['measures'][m])}" for m in HEADERS), f"s={run['seconds']}"])

    def measure(name: str) -> Callable[[dict], float]:
        return lambda run: run["measures"][name]

    columns: dict[str, Callable[[dict], Any]] = {"mode": lambda run: run["mode"], "fusion": lambda run: run["fusion"],
                                                 "first_pass": lambda run: run["first_pass"],
                                                 **{m: measure(m) for m in HEADERS}, "seconds": lambda run: run["seconds"]}
    return Listing(document["runs"], columns, line)


def _print_tables(document: dict) -> None:
    from rich import box
    from rich.table import Table

    from ..core.terminal import results_console

    console = results_console(highlight=False)
    title = (f"{document['queries']} queries, {document['judged_pages']} relevant pages ({display_path(document['query_set'])}); "
             f"index {display_path(document['index'])}, model {display_path(document['model'])}, "
             f"pool factor {document['pool_factor']}")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("mode", min_width=6)
    table.add_column("first\npass", justify="right", width=5, no_wrap=True)
    for header in HEADERS.values():
        table.add_column(header.replace("@", "\n@"), justify="right", width=5, no_wrap=True)
    table.add_column("\ns", justify="right", no_wrap=True)
    for run in document["runs"]:
        mode = run["mode"] + (f" {run['fusion']}" if run["fusion"] else "")
        table.add_row(mode, str(run["first_pass"] or "exact"), *(f"{run['measures'][m]:.3f}" for m in HEADERS),
                      f"{run['seconds']:.1f}")
    console.print(table)
    for run in document["runs"]:
        if "groups" in run:
            console.print(_group_table(run))
    for run in document["runs"]:
        if "per_query" in run:
            console.print(_query_table(run, console.width))


def _label(run: dict) -> str:
    label = run["mode"] + (f" {run['fusion']}" if run["fusion"] else "")
    return label + (f", first pass {run['first_pass']}" if run["first_pass"] else "")


def _group_table(run: dict):
    from rich import box
    from rich.table import Table

    table = Table(title=f"by group: {_label(run)}", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("group", max_width=16, overflow="ellipsis", no_wrap=True)
    table.add_column("\nqueries", justify="right", no_wrap=True)
    for header in HEADERS.values():
        table.add_column(header.replace("@", "\n@"), justify="right", width=5, no_wrap=True)
    for value, group in run["groups"].items():
        table.add_row(display_path(value), str(group["queries"]), *(f"{group['measures'][m]:.3f}" for m in HEADERS))
    return table


def _query_table(run: dict, width: int):
    from rich import box
    from rich.table import Table

    table = Table(title=f"per query: {_label(run)}", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("id", no_wrap=True, max_width=20, overflow="ellipsis")
    for measure in ("ndcg@5", "ndcg@10", "recall@10", "mrr@10"):
        table.add_column(HEADERS[measure].replace("@", "\n@"), justify="right", min_width=5, no_wrap=True)
    table.add_column("first\nrel.", justify="right", min_width=5, no_wrap=True)
    table.add_column("query", no_wrap=True, overflow="ellipsis", max_width=max(12, width - 60))  # the rest of the line
    for detail in run["per_query"]:
        measures = detail["measures"]
        table.add_row(display_path(detail["id"]), *(f"{measures[m]:.3f}" for m in ("ndcg@5", "ndcg@10", "recall@10", "mrr@10")),
                      str(detail["first_relevant"] or "-"), display_path(detail["query"]))
    return table
