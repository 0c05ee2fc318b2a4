"""lgpt-index query"""

from __future__ import annotations

import click

from .options import (
    EXIT_CODES,
    display_path,
    index_options,
    make_terminal,
    model_options,
    output_options,
    print_json,
    report_errors,
)

QUERY_SCHEMA_VERSION = 1


@click.command(epilog=EXIT_CODES)
@click.argument("text", nargs=-1)
@click.option("--queries-file", type=click.File("r", encoding="utf-8"), default=None,
              help="More queries, one per line ('-' for stdin); all are encoded in one batch.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Only documents whose metadata has KEY=VALUE (repeatable: all must match).")
@click.option("--export-pages", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Write the pages found as PNG files into this folder, with a manifest.json.")
@click.option("--dpi", type=click.IntRange(20, 600), default=150, show_default=True, help="Resolution of page images.")
@click.option("--with-images", is_flag=True, help="With --json: each result carries its page as base64 PNG.")
@click.option("--first-pass", "candidates", type=click.IntRange(1), default=None, metavar="N",
              help="Lossy, off by default: score sign-quantised vectors first and only the best N pages exactly.")
@click.option("-k", "top_k", type=click.IntRange(1), default=5, show_default=True, help="Pages to return per query.")
@click.option("--model", "-m", default=None, metavar="ID|PATH", help="Must be the model the index was built with. [default: that model]")
@model_options
@index_options
@output_options
@report_errors
def query(text, queries_file, filters, export_dir, dpi, with_images, candidates, top_k, model, device, dtype, index_dir, name, as_json, quiet, verbose) -> None:
    """Return the pages that best answer TEXT (several TEXT arguments: one query each)."""
    from ..errors import UsageError
    from ..search import open_index

    text = list(text) + ([line.strip() for line in queries_file if line.strip()] if queries_file else [])
    if not text:
        raise UsageError("no query: give TEXT or --queries-file.")

    terminal = make_terminal(quiet, verbose)
    index = open_index(index_dir, name)
    encoder = index.load_encoder(model, device, dtype)
    from ..checkpoints import is_random_checkpoint

    if is_random_checkpoint(encoder.model.path):
        terminal.warn(f"{encoder.model.id} is a random-weight test checkpoint: these rankings are not meaningful.")
    terminal.detail(f"model {index.manifest.model['id']} on {encoder.precision.device} in {encoder.precision.dtype}")
    from ..metadata import parse_filters

    results = index.search(list(text), k=top_k, filters=parse_filters(filters), candidates=candidates)
    if export_dir:
        from pathlib import Path

        from ..pages import export_pages

        manifest = export_pages(index, list(text), results, Path(export_dir), dpi)
        terminal.info(f"page images and {manifest.name} written to {export_dir}")
    if as_json:
        from ..pages import page_image, png_base64

        def result(hit) -> dict:
            data = hit.to_dict()
            if with_images:
                data["image_base64"] = png_base64(page_image(index, hit, dpi))
            return data

        queries = [{"query": q, "results": [result(hit) for hit in hits]} for q, hits in zip(text, results)]
        document = {
            "version": QUERY_SCHEMA_VERSION,
            "index": str(index.store.root),
            "model": index.manifest.model["id"],
            "k": top_k,
            "queries": queries,
        }
        if len(queries) == 1:
            document.update(queries[0])
        print_json(document)
        return
    _print_tables(text, results)


def _print_tables(texts, results) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, highlight=False)
    for text, hits in zip(texts, results):
        table = Table(title=text, title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("score", justify="right")
        table.add_column("page", justify="right")
        table.add_column("document", overflow="fold")
        for hit in hits:
            table.add_row(str(hit.rank), f"{hit.score:.3f}", str(hit.page), display_path(hit.path))
        console.print(table)
