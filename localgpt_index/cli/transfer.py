"""lgpt-index export / import"""

from __future__ import annotations

from pathlib import Path

import click

from .options import index_options, make_terminal, output_options, print_json, report_errors


@click.command("export")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["byaldi"]), default="byaldi", show_default=True)
@click.option("--with-images", is_flag=True, help="Include the page images (byaldi's collection/), as base64 PNG.")
@click.option("--dpi", type=click.IntRange(20, 600), default=150, show_default=True, help="Resolution of those images.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@index_options
@output_options
@report_errors
def export(out, fmt, with_images, dpi, force, index_dir, name, as_json, quiet, verbose) -> None:
    """Write the index as a byaldi 0.0.7 index in the folder OUT.

    byaldi then loads it with RAGMultiModalModel.from_index("<OUT's name>", index_root="<OUT's parent>").
    """
    from ..byaldi_format import export_byaldi
    from ..search import open_index

    terminal = make_terminal(quiet, verbose)
    result = export_byaldi(open_index(index_dir, name), Path(out), with_images, dpi, force)
    if as_json:
        print_json(result)
    terminal.info(f"{result['documents']} documents, {result['pages']} pages written to {out} (byaldi format)")


@click.command("import")
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["byaldi"]), default="byaldi", show_default=True)
@click.option("--model", "-m", default=None, metavar="ID|PATH", help="The model the vectors came from. [default: byaldi's model_name]")
@index_options
@output_options
@report_errors
def import_(source, fmt, model, index_dir, name, as_json, quiet, verbose) -> None:
    """Read the byaldi index in the folder SOURCE into a new index, without embedding again."""
    from dataclasses import asdict

    from ..byaldi_format import import_byaldi
    from ..store import IndexStore, index_path

    terminal = make_terminal(quiet, verbose)
    report = import_byaldi(Path(source), IndexStore(index_path(index_dir, name)), model)
    if as_json:
        print_json(asdict(report))
    terminal.info(f"{report.documents} documents, {report.pages} pages imported into {report.index}")
