"""lgpt-index query"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.types import FUSIONS, MODES
from ..query.fusion import RRF_K
from ..query.bounds import DPI, MAX_K, MAX_RRF_K, check_utf8
from .app import AppCommand, Application, output_options
from .defaults import TuningOption
from .formats import format_option
from .options import EXIT_CODES, INDEX_MODEL_HELP, display_path, index_options, model_options, scoring_options
from .warm import ask_warm, keep_warm, local_root, warm_options

if TYPE_CHECKING:
    from ..models.resolve import ModelSpec

# the request's fields, as the command line names them (in its messages)
FLAGS = {"queries": "query", "k": "-k", "filters": "--filter", "first_pass": "--first-pass", "mode": "--mode",
         "fusion": "--fusion", "rrf_k": "--rrf-k", "dpi": "--dpi", "all_copies": "--all-copies",
         "regions": "--regions"}


@click.command(cls=AppCommand, epilog=EXIT_CODES)
@click.argument("text", nargs=-1)
@click.option("--queries-file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="More queries, one per line ('-' for stdin); all are encoded in one batch.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Only documents whose metadata has KEY=VALUE (repeatable: all must match).")
@click.option("--export-pages", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Write the pages found as PNG files into this folder, with a manifest.json.")
@click.option("--highlight", cls=TuningOption, is_flag=True,
              help="With --export-pages: each page with its regions drawn (text matches outlined, the model's as a heat map); "
                   "implies --regions.")
@click.option("--regions", cls=TuningOption, is_flag=True,
              help="Each hit carries where on its page it matched: boxes from the words holding the query's terms and "
                   "from the patches its tokens matched (JSON: `regions`; the table and lines: the best text match's place).")
@click.option("--dpi", cls=TuningOption, type=click.IntRange(DPI[0], DPI[2]), default=DPI[1], show_default=True,
              help="Resolution of page images.")
@click.option("--with-images", is_flag=True, help="With --json or --format jsonl: each result carries its page as base64 PNG.")
@click.option("--first-pass", cls=TuningOption, default=None, metavar="N|auto",
              help="Lossy, off by default: a cheap first pass picks N pages, only those are scored exactly "
                   "(local: 1-bit codes stored with the index; Qdrant: its binary quantization, then rescoring). "
                   "'auto': only where exact cannot serve (docs/performance.md).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="hybrid: the text (BM25) and visual candidate lists, fused; visual: the model only; text: page text only "
                   "(no model loaded). [default: hybrid when the index has page text, else visual]")
@click.option("--fusion", cls=TuningOption, type=click.Choice(FUSIONS), default="weighted", show_default=True,
              help="hybrid: weigh each list by the evidence it carries, or plain reciprocal-rank fusion.")
@click.option("--rrf-k", cls=TuningOption, type=click.IntRange(0, MAX_RRF_K), default=RRF_K, show_default=True,
              help="The k of --fusion rrf: 1 / (k + rank).")
@click.option("--with-text", is_flag=True, help="With --json or --format jsonl: each result carries its page's text (for answerers).")
@click.option("--all-copies", cls=TuningOption, is_flag=True,
              help="List byte-identical documents apart, a hit per path (by default one hit names the other paths as copies).")
@click.option("-k", "top_k", type=click.IntRange(1, MAX_K), default=5, show_default=True, help="Pages to return per query.")
@click.option("--server", envvar="LGPT_SERVER", default=None, metavar="URL",
              help="Ask a running `lgpt-index serve` instead of loading the model here. [env: LGPT_SERVER]")
@click.option("--token", cls=TuningOption, envvar="LGPT_SERVE_TOKEN", default=None, metavar="TOKEN",
              help="The server's bearer token. [env: LGPT_SERVE_TOKEN]")
@warm_options
@model_options(INDEX_MODEL_HELP, everyday=False)
@scoring_options
@index_options
@output_options
@format_option
@click.pass_obj
def query(app: Application, text, queries_file, filters, export_dir, highlight, regions, dpi, with_images, first_pass, mode, fusion,
          rrf_k, with_text, all_copies, top_k, server, token, no_warm, keep_warm_s, model_spec, scorer, max_resident) -> None:
    """Return the pages that best answer TEXT (several TEXT arguments: one query each)."""
    from ..core.errors import UsageError
    from .formats import chosen_format, write

    fmt = chosen_format(app.output_format, app.as_json)
    texts = list(text) + (read_queries_file(queries_file) if queries_file else [])
    if not texts:
        raise UsageError(f"no query: --queries-file {queries_file} holds none (one a line)." if queries_file
                         else "no query: give TEXT or --queries-file.")
    if highlight and not export_dir:
        raise UsageError("--highlight draws on the pages --export-pages DIR writes: give --export-pages too.")
    if export_dir and not server and (root := local_root(app)) is not None:
        from ..index.format.files import inside  # (an export is never asked of a warm service: no pydantic spared)

        if inside(root, Path(export_dir, "page.png")):  # (its pages would be: the folder is the index or inside it)
            raise UsageError(f"--export-pages {export_dir}: inside the index ({root}); choose a folder outside it.")
    from ..core.metadata import parse_filters

    for number, given in enumerate(texts, 1):  # named with their bytes here (the request's own checks do not echo them)
        check_utf8(given, f"query {number}", shown=True)
    for pair in filters:
        check_utf8(pair, "--filter", shown=True)
    parsed_filters = parse_filters(filters)
    structured = fmt in ("json", "jsonl")  # the formats that carry a page's text and image
    # the request's fields: a warm service checks them as QueryRequest (pydantic stays out of this process),
    # and where it refuses them the local path below says why
    fields = dict(queries=texts, k=top_k, filters=list(filters), first_pass=first_pass, mode=mode, fusion=fusion, rrf_k=rrf_k,
                  with_text=with_text and structured, with_images=with_images and structured, dpi=dpi, all_copies=all_copies,
                  regions=regions or highlight)
    if server:
        request = _request(**fields)
        _refuse_local_options(click.get_current_context(), server)
        if request.first_pass == "auto":
            raise UsageError("--first-pass auto cannot be used with a server: give a number of candidate pages.",
                             hint="The server's index decides nothing for you here; e.g. --first-pass 1000.")
        from ..interop.results import hint_notes

        document, fetch = _ask_server(server, token, request)
        app.terminal.say(hint_notes(document))
    elif not (no_warm or export_dir) and (warm := ask_warm(app, fields, model_spec, scorer, max_resident)) is not None:
        document, fetch = warm, None
    else:
        from ..query.search import DeviceScoring

        document, fetch = _ask_index(app, _request(**fields), model_spec, DeviceScoring(scorer, max_resident))
        if keep_warm_s is not None:
            keep_warm(app, keep_warm_s, model_spec, scorer, max_resident)
    if filters and not any(answer["results"] for answer in document["queries"]):
        shown = " ".join(f"--filter {key}={value}" for key, value in parsed_filters.items())
        app.terminal.info(f"hint: no document matches {shown}; `lgpt-index ls` shows the documents' metadata.")
    if export_dir:
        from ..interop.pages import export_pages

        if highlight:  # drawn here, from the hit's regions, whoever rendered the page (this index or a server)
            fetch = _highlighted(fetch)
        manifest = export_pages(document, Path(export_dir), dpi, fetch)  # (never warm: fetch is the local one)
        app.terminal.info(f"page images and {manifest.name} written to {export_dir}")
    write(fmt, _listing(document), document, lambda: _print_tables(document), app.print_json)


def _highlighted(fetch):
    """`fetch` (a hit's page as PNG) with the hit's regions drawn on the page."""
    from ..interop.highlight import highlighted_png, region_of

    return lambda hit: highlighted_png(fetch(hit), [region_of(region) for region in hit.get("regions", ())])


def _request(**fields):
    """The query request the command line asks for; a field it refuses is a usage error naming the option."""
    from pydantic import ValidationError

    from ..core.errors import UsageError
    from ..query.request import QueryRequest

    try:
        return QueryRequest(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = FLAGS.get(str(error["loc"][0]), str(error["loc"][0])) if error["loc"] else "query"
        raise UsageError(f"{flag}: {error['msg']}.") from None


def _ask_index(app: Application, request, model: ModelSpec, scoring):
    """The query document from the index here: `model` (its --model, --device, --dtype) loaded unless
    text mode answers; `scoring` where exact scoring runs."""
    from ..interop.pages import attach_images, local_page
    from ..interop.reports import query_answer
    from ..query.search import open_index

    index = open_index(store=app.store(), scoring=scoring)
    encoder = index.load_encoder(model) if index.mode(request) != "text" else None
    results = index.search(request)
    document, notes = query_answer(index, request, results, encoder)
    if request.with_images:  # a page that cannot be rendered: an image_error on its hit, as serve and mcp answer
        attach_images(document, results, index.view, request.dpi)
    app.terminal.say(notes)
    return document, local_page(index.view, request.dpi)


def _ask_server(server, token, request):
    from ..serve.client import ServerClient

    client = ServerClient(server, token)
    document = client.query(request)
    return document, lambda hit: client.page(hit["sha256"], hit["page"], request.dpi)


# Options that pick or load a local index and model: with --server, the server's index answers.
_LOCAL_ONLY = {"store": "--store", "index_dir": "--index-dir", "name": "--name", "pdf_store": "--pdf-store",
               "qdrant_api_key": "--qdrant-api-key", "model": "--model", "device": "--device", "dtype": "--dtype",
               "scorer": "--scorer", "max_resident": "--max-resident"}


def _refuse_local_options(ctx: click.Context, server: str) -> None:
    """--server with options that only a local query reads: a usage error naming them (they would be
    ignored: the server answers from the index it serves). Their environment variables stay quiet."""
    from click.core import ParameterSource

    from ..core.errors import UsageError

    here = [ctx, ctx.parent] if ctx.parent is not None else [ctx]  # given to the command, or before it (the group's)
    given = [flag for name, flag in _LOCAL_ONLY.items()
             if any(where.get_parameter_source(name) == ParameterSource.COMMANDLINE for where in here)]
    if given:
        from_option = ctx.get_parameter_source("server") == ParameterSource.COMMANDLINE
        origin = f"--server {server}" if from_option else f"$LGPT_SERVER ({server})"
        raise UsageError(f"{', '.join(given)} cannot be used with {origin}: the server answers from the index and model it serves.",
                         hint="Drop them, or query the index here without --server (unset LGPT_SERVER).")


def read_queries_file(path: str) -> list[str]:
    """One query per line; a file that is not UTF-8 text, or over 16 MiB, is refused with a message."""
    from ..core.files import read_user_text

    text = read_user_text(path, limit=16 << 20, label=f"--queries-file {path}")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _listing(document: dict):
    """The hits of every query, one record each (jsonl: the document's hit with its `query`)."""
    from ..interop.highlight import best_region_line
    from .formats import Listing, cell, clean, plain

    several = len(document["queries"]) > 1

    def line(hit: dict) -> str:  # path:page<TAB>score<TAB>snippet, as ripgrep's path:line:text; several queries: the query first
        fields = [f"{clean(hit['path'])}:{hit['page']}", cell(hit["score"]), clean(plain(hit.get("snippet", "")))]
        if hit.get("copies"):
            fields.append("copies: " + cell(hit["copies"]))
        if hit.get("regions"):
            fields.append("at: " + clean(best_region_line(hit) or ""))
        return "\t".join(([clean(hit["query"])] if several else []) + fields)

    rows = [{"query": answer["query"], **hit} for answer in document["queries"] for hit in answer["results"]]
    columns = {"query": lambda hit: hit["query"], "rank": lambda hit: hit["rank"], "score": lambda hit: hit["score"],
               "path": lambda hit: hit["path"], "page": lambda hit: hit["page"], "copies": lambda hit: hit.get("copies"),
               "snippet": lambda hit: plain(hit.get("snippet", ""))}
    if any("regions" in hit for hit in rows):  # (--regions)
        columns["where"] = best_region_line
    return Listing(rows, columns, line, paths=lambda hit: [hit["path"]])


def _print_tables(document: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..core.terminal import results_console
    from ..interop.highlight import best_region_line
    from .formats import styled_snippet

    console = results_console(highlight=False)
    for answer in document["queries"]:
        table = Table(title=display_path(answer["query"]), title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("score", justify="right")
        table.add_column("page", justify="right")
        table.add_column("document", overflow="fold")
        snippets = any("snippet" in hit for hit in answer["results"])
        if snippets:
            table.add_column("text", overflow="fold", max_width=60)
        regions = any("regions" in hit for hit in answer["results"])
        if regions:
            table.add_column("where", overflow="fold", max_width=50)
        for hit in answer["results"]:
            where = Text(display_path(hit["path"]))
            for copy in hit.get("copies", ()):
                where.append(f"\n= {display_path(copy)}", style="dim")
            row: list[str | Text] = [str(hit["rank"]), f"{hit['score']:.3f}", str(hit["page"]), where]
            row += [styled_snippet(hit.get("snippet", ""))] if snippets else []
            row += [display_path(best_region_line(hit) or "")] if regions else []
            table.add_row(*row)
        console.print(table)
