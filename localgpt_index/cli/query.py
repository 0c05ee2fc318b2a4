"""lgpt-index query"""

from __future__ import annotations

import click

from .app import Application, output_options
from .options import EXIT_CODES, display_path, index_options, model_options

QUERY_SCHEMA_VERSION = 1


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
@click.option("--first-pass", "candidates", type=click.IntRange(1), default=None, metavar="N",
              help="Lossy, off by default: score sign-quantised vectors first and only the best N pages exactly.")
@click.option("-k", "top_k", type=click.IntRange(1, 10000), default=5, show_default=True, help="Pages to return per query.")
@click.option("--model", "-m", default=None, metavar="ID|PATH", help="Must be the model the index was built with. [default: that model]")
@model_options
@index_options
@output_options
@click.pass_obj
def query(app: Application, text, queries_file, filters, export_dir, dpi, with_images, candidates, top_k, model, device,
          dtype, index_dir, name) -> None:
    """Return the pages that best answer TEXT (several TEXT arguments: one query each)."""
    from ..checkpoints import is_random_checkpoint
    from ..encode import check_queries
    from ..errors import UsageError
    from ..metadata import parse_filters
    from ..search import open_index

    texts = check_queries(list(text) + (read_queries_file(queries_file) if queries_file else []))
    if not texts:
        raise UsageError("no query: give TEXT or --queries-file.")
    wanted = parse_filters(filters)
    terminal = app.terminal
    index = open_index(index_dir, name)
    encoder = index.load_encoder(model, device, dtype)
    if is_random_checkpoint(encoder.model.path):
        terminal.warn(f"{encoder.model.id} is a random-weight test checkpoint: these rankings are not meaningful.")
    terminal.detail(f"model {index.manifest.model.id} on {encoder.precision.device} in {encoder.precision.dtype}")
    results = index.search(texts, k=top_k, filters=wanted, candidates=candidates)
    if export_dir:
        from pathlib import Path

        from ..pages import export_pages

        manifest = export_pages(index, texts, results, Path(export_dir), dpi)
        terminal.info(f"page images and {manifest.name} written to {export_dir}")
    if app.as_json:
        app.print_json(query_document(index, texts, results, top_k, with_images, dpi))
        return
    _print_tables(texts, results)


def read_queries_file(path: str) -> list[str]:
    """One query per line; a file that is not UTF-8 text is refused with a message."""
    from ..errors import UsageError

    try:
        raw = click.open_file(path, "rb").read(16 << 20)
        text = raw.decode("utf-8-sig")
    except OSError as exc:
        raise UsageError(f"--queries-file {path}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError:
        raise UsageError(f"--queries-file {path}: not UTF-8 text (a binary file?).") from None
    if "\x00" in text:
        raise UsageError(f"--queries-file {path}: holds NUL bytes; not a text file.")
    return [line.strip() for line in text.splitlines() if line.strip()]


def query_document(index, texts: list[str], results, top_k: int, with_images: bool = False, dpi: int = 150) -> dict:
    """The `query --json` document (localgpt_index/schemas/query.schema.json)."""
    from ..pages import page_image, png_base64

    def result(hit) -> dict:
        data = hit.to_dict()
        if with_images:
            data["image_base64"] = png_base64(page_image(index, hit, dpi))
        return data

    queries = [{"query": q, "results": [result(hit) for hit in hits]} for q, hits in zip(texts, results)]
    document = {
        "version": QUERY_SCHEMA_VERSION,
        "index": str(index.store.root),
        "model": index.manifest.model.id,
        "k": top_k,
        "queries": queries,
    }
    if len(queries) == 1:
        document.update(queries[0])
    return document


def _print_tables(texts, results) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, highlight=False)
    for text, hits in zip(texts, results):
        table = Table(title=display_path(text), title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("score", justify="right")
        table.add_column("page", justify="right")
        table.add_column("document", overflow="fold")
        for hit in hits:
            table.add_row(str(hit.rank), f"{hit.score:.3f}", str(hit.page), display_path(hit.path))
        console.print(table)
