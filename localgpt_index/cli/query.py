"""lgpt-index query"""

from __future__ import annotations

import click

from .app import Application, output_options
from .options import EXIT_CODES, INDEX_MODEL_HELP, display_path, index_options, model_options, scoring_options


class FirstPass(click.ParamType):
    """--first-pass: a number of candidates (at least 1) or 'auto'."""

    name = "N|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "auto":
            return value
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            self.fail(f"{value!r} is neither a number of candidate pages (1 or more) nor 'auto'.", param, ctx)
        return number


@click.command(epilog=EXIT_CODES)
@click.argument("text", nargs=-1)
@click.option("--queries-file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="More queries, one per line ('-' for stdin); all are encoded in one batch.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Only documents whose metadata has KEY=VALUE (repeatable: all must match).")
@click.option("--export-pages", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Write the pages found as PNG files into this folder, with a manifest.json.")
@click.option("--dpi", type=click.IntRange(20, 600), default=150, show_default=True, help="Resolution of page images.")
@click.option("--with-images", is_flag=True, help="With --json: each result carries its page as base64 PNG.")
@click.option("--first-pass", "candidates", type=FirstPass(), default=None, metavar="N|auto",
              help="Lossy, off by default: a cheap first pass picks N pages, only those are scored exactly "
                   "(local: 1-bit codes stored with the index; Qdrant: its binary quantization, then rescoring). "
                   "'auto': only where exact cannot serve (docs/performance.md).")
@click.option("--mode", type=click.Choice(["hybrid", "visual", "text"]), default=None,
              help="hybrid: the text (BM25) and visual candidate lists, fused; visual: the model only; text: page text only "
                   "(no model loaded). [default: hybrid when the index has page text, else visual]")
@click.option("--fusion", type=click.Choice(["weighted", "rrf"]), default="weighted", show_default=True,
              help="hybrid: weigh each list by the evidence it carries, or plain reciprocal-rank fusion.")
@click.option("--rrf-k", type=click.IntRange(0, 100_000), default=60, show_default=True, help="The k of --fusion rrf: 1 / (k + rank).")
@click.option("--with-text", is_flag=True, help="With --json: each result carries its page's text (for answerers).")
@click.option("-k", "top_k", type=click.IntRange(1, 1000), default=5, show_default=True, help="Pages to return per query.")
@click.option("--server", envvar="LGPT_SERVER", default=None, metavar="URL",
              help="Ask a running `lgpt-index serve` instead of loading the model here. [env: LGPT_SERVER]")
@click.option("--token", envvar="LGPT_SERVE_TOKEN", default=None, metavar="TOKEN",
              help="The server's bearer token. [env: LGPT_SERVE_TOKEN]")
@model_options(INDEX_MODEL_HELP)
@scoring_options
@index_options
@output_options
@click.pass_obj
def query(app: Application, text, queries_file, filters, export_dir, dpi, with_images, candidates, mode, fusion, rrf_k, with_text,
          top_k, server, token, model_spec, scorer, max_resident) -> None:
    """Return the pages that best answer TEXT (several TEXT arguments: one query each)."""
    from ..models.protocols import check_queries
    from ..core.errors import UsageError
    from ..core.metadata import parse_filters

    texts = check_queries(_utf8(list(text), "query") + (read_queries_file(queries_file) if queries_file else []))
    if not texts:
        raise UsageError("no query: give TEXT or --queries-file.")
    wanted = parse_filters(_utf8(list(filters), "--filter"))
    images = with_images and app.as_json
    how = {"mode": mode, "fusion": fusion, "rrf_k": rrf_k, "with_text": with_text and app.as_json}
    if server:
        _refuse_local_options(click.get_current_context(), server)
        if candidates == "auto":
            raise UsageError("--first-pass auto cannot be used with a server: give a number of candidate pages.",
                             hint="The server's index decides nothing for you here; e.g. --first-pass 1000.")
        document, fetch = _ask_server(server, token, texts, top_k, wanted, candidates, images, dpi, how)
    else:
        document, fetch = _ask_index(app, model_spec, texts, top_k, wanted, candidates, images, dpi, how, (scorer, max_resident))
    if wanted and not any(answer["results"] for answer in document["queries"]):
        shown = " ".join(f"--filter {key}={value}" for key, value in wanted.items())
        app.terminal.info(f"hint: no document matches {shown}; `lgpt-index ls` shows the documents' metadata.")
    if export_dir:
        from pathlib import Path

        from ..interop.pages import export_pages

        manifest = export_pages(document, Path(export_dir), dpi, fetch)
        app.terminal.info(f"page images and {manifest.name} written to {export_dir}")
    if app.as_json:
        app.print_json(document)
        return
    _print_tables(document)


def _ask_index(app: Application, model_spec, texts, top_k, filters, candidates, images, dpi, how, scoring):
    from ..models.resolve import is_random_checkpoint
    from ..interop.pages import local_page
    from ..interop.reports import query_document
    from ..query.search import DeviceScoring, QueryOptions, open_index

    index = open_index(store=app.store(), scoring=DeviceScoring(*scoring))
    options = QueryOptions(**how)
    mode = index.mode(options)
    if mode != "text":
        encoder = index.load_encoder(model_spec)
        if is_random_checkpoint(encoder.model.path):
            app.terminal.warn(f"{encoder.model.id} is a random-weight test checkpoint: these rankings are not meaningful.")
        app.terminal.detail(f"model {index.manifest.model.id} on {encoder.precision.device} in {encoder.precision.dtype}")
    results = index.search(texts, k=top_k, filters=filters, candidates=candidates, options=options)
    if mode != "visual" and not index.lexical.has_pages():
        app.terminal.info("hint: no page of this index has text (pictures read with --ocr never, or no document): "
                          "text finds nothing here.")
    document = query_document(index, texts, results, top_k, images, dpi, mode=mode, fusion=options.fusion)
    on_device = index.device_scoring() if mode != "text" else None
    if (candidates is not None or on_device) and mode != "text":  # which path answered (QueryDocument.scoring); else exact, CPU
        scoring = index.view.scoring_path(candidates)
        document["scoring"] = scoring.to_json() | ({"device": on_device} if on_device else {})
        where = f" on {on_device['device']}" if on_device else ""
        app.terminal.detail(f"scored: {scoring.path}{where} ({scoring.reason})")
        if scoring.hint:
            app.terminal.info(f"hint: {scoring.hint}")
    return document, local_page(index, dpi)


def _ask_server(server, token, texts, top_k, filters, candidates, images, dpi, how):
    from ..serve.client import ServerClient

    client = ServerClient(server, token)
    # only what the user chose is sent: a server that predates hybrid queries still answers a plain query
    ctx = click.get_current_context()
    from click.core import ParameterSource

    chosen = {key: value for key, value in how.items()
              if ctx.get_parameter_source(key) == ParameterSource.COMMANDLINE and value not in (None, False)}
    document = client.query(texts, top_k, filters, candidates, images, dpi, chosen)
    return document, lambda hit: client.page(hit["sha256"], hit["page"], dpi)


def _utf8(values: list[str], what: str) -> list[str]:
    """Command-line values as given; one that is not UTF-8 (bytes Python kept as surrogate escapes)
    is refused here, before a tokenizer or an HTTP body meets it."""
    from ..core.errors import UsageError

    for number, value in enumerate(values, 1):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            name = f"query {number}" if what == "query" else f"{what} {display_path(value)}"
            raise UsageError(f"{name} is not UTF-8 text ({value.encode('utf-8', 'surrogateescape')!r}).",
                             hint="Check the terminal's or the script's encoding (the locale): queries are UTF-8 text.") from None
    return values


# Options that pick or load a local index and model: with --server, the server's index answers.
_LOCAL_ONLY = {"store": "--store", "index_dir": "--index-dir", "name": "--name", "pdf_store": "--pdf-store",
               "qdrant_api_key": "--qdrant-api-key", "model": "--model", "device": "--device", "dtype": "--dtype",
               "scorer": "--scorer", "max_resident": "--max-resident"}


def _refuse_local_options(ctx: click.Context, server: str) -> None:
    """--server with options that only a local query reads: a usage error naming them (they would be
    ignored: the server answers from the index it serves). Their environment variables stay quiet."""
    from click.core import ParameterSource

    from ..core.errors import UsageError

    given = [flag for name, flag in _LOCAL_ONLY.items() if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
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


def _print_tables(document: dict) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, highlight=False)
    for answer in document["queries"]:
        table = Table(title=display_path(answer["query"]), title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("score", justify="right")
        table.add_column("page", justify="right")
        table.add_column("document", overflow="fold")
        snippets = any("snippet" in hit for hit in answer["results"])
        if snippets:
            table.add_column("text", overflow="fold", max_width=60)
        for hit in answer["results"]:
            row = [str(hit["rank"]), f"{hit['score']:.3f}", str(hit["page"]), display_path(hit["path"])]
            table.add_row(*row, *([display_path(hit.get("snippet", ""))] if snippets else []))
        console.print(table)
