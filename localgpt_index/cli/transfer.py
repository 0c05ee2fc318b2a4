"""lgpt-index export / import"""

from __future__ import annotations

from pathlib import Path

import click

from .app import Application, output_options
from .options import index_options


@click.command("export")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["byaldi"]), default="byaldi", show_default=True)
@click.option("--with-images", is_flag=True, help="Include the page images (byaldi's collection/), as base64 PNG.")
@click.option("--dpi", type=click.IntRange(20, 600), default=150, show_default=True, help="Resolution of those images.")
@click.option("--force", is_flag=True, help="Replace OUT if it holds an earlier export.")
@index_options
@output_options
@click.pass_obj
def export(app: Application, out, fmt, with_images, dpi, force, index_dir, name) -> None:
    """Write the index as a byaldi 0.0.7 index in the folder OUT.

    byaldi then loads it with RAGMultiModalModel.from_index("<OUT's name>", index_root="<OUT's parent>").
    OUT is written beside its final place and swapped in once complete.
    """
    from ..byaldi_format import export_byaldi
    from ..search import open_index

    result = export_byaldi(open_index(index_dir, name), Path(out), with_images, dpi, force)
    if app.as_json:
        app.print_json(result)
    app.terminal.info(f"{result['documents']} documents, {result['pages']} pages written to {out} (byaldi format)")


@click.command("import")
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["byaldi"]), default="byaldi", show_default=True)
@click.option("--model", "-m", default=None, metavar="ID|PATH", help="The model the vectors came from. [default: byaldi's model_name]")
@index_options
@output_options
@click.pass_obj
def import_(app: Application, source, fmt, model, index_dir, name) -> None:
    """Read the byaldi index in the folder SOURCE into a new index, without embedding again.

    Every field is checked: a malformed or hostile folder is refused (exit 2) with the reason.
    """
    from dataclasses import asdict

    from ..byaldi_format import import_byaldi
    from ..store import IndexStore, index_path

    report = import_byaldi(Path(source), IndexStore(index_path(index_dir, name)), model)
    if app.as_json:
        app.print_json(asdict(report))
    app.terminal.info(f"{report.documents} documents, {report.pages} pages imported into {report.index}")
