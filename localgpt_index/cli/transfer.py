"""lgpt-index export / import"""

from __future__ import annotations

from pathlib import Path

import click

from .app import AppCommand, Application, output_options
from .defaults import OwnOption
from .options import SECONDS, index_options


@click.command("export", cls=AppCommand)
@click.argument("out")
@click.option("--format", "fmt", cls=OwnOption, type=click.Choice(["byaldi", "qdrant"]), default="byaldi", show_default=True,
              help="byaldi: OUT is a folder. qdrant: OUT is a store URL (qdrant://HOST:PORT/COLLECTION, qdrant+path://DIR/COLLECTION).")
@click.option("--with-images", is_flag=True, help="byaldi: include the page images (byaldi's collection/), as base64 PNG.")
@click.option("--dpi", type=click.IntRange(20, 600), default=150, show_default=True, help="Resolution of those images.")
@click.option("--force", is_flag=True, help="byaldi: replace OUT if it holds an earlier export.")
@click.option("--wait", "wait_s", type=SECONDS, default=0.0, help="qdrant: seconds to wait for another writer of OUT to finish.")
@index_options
@output_options
@click.pass_obj
def export(app: Application, out, fmt, with_images, dpi, force, wait_s) -> None:
    """Copy the index, without embedding again: into a byaldi 0.0.7 folder OUT, or into a Qdrant collection.

    byaldi then loads it with RAGMultiModalModel.from_index("<OUT's name>", index_root="<OUT's parent>");
    OUT is written beside its final place and swapped in once complete. A Qdrant OUT must be empty;
    --pdf-store names its folder for converted PDFs.
    """
    from ..query.search import open_index

    index = open_index(store=app.store()).view
    if fmt == "qdrant":
        result = _copy(app, index, _empty_target(_qdrant(app, out), out), wait_s)
    else:
        from ..interop.byaldi_format import export_byaldi

        result = export_byaldi(index, Path(out), with_images, dpi, force)
    if app.as_json:
        app.print_json(result)
    app.terminal.info(f"{result['documents']} documents, {result['pages']} pages written to {out} ({fmt} format)")


@click.command("import", cls=AppCommand)
@click.argument("source")
@click.option("--format", "fmt", cls=OwnOption, type=click.Choice(["byaldi", "qdrant"]), default="byaldi", show_default=True,
              help="byaldi: SOURCE is a byaldi index folder. qdrant: SOURCE is a store URL.")
@click.option("--model", "-m", cls=OwnOption, default=None, metavar="ID|PATH",
              help="byaldi: the model the vectors came from. [default: byaldi's model_name]")
@click.option("--wait", "wait_s", type=SECONDS, default=0.0, help="Seconds to wait for another writer to finish.")
@index_options
@output_options
@click.pass_obj
def import_(app: Application, source, fmt, model, wait_s) -> None:
    """Read an index into a new one, without embedding again: a byaldi folder SOURCE, or a Qdrant collection.

    Every field of a byaldi folder is checked: a malformed or hostile folder is refused (exit 2)
    with the reason. --pdf-store names the Qdrant side's folder of converted PDFs.
    """
    from ..core.errors import UsageError

    if fmt == "qdrant":
        from ..query.search import open_index

        result = _copy(app, open_index(store=_qdrant(app, source)).view, app.store(), wait_s)
    else:
        from dataclasses import asdict

        from ..interop.byaldi_format import import_byaldi

        if not Path(source).is_dir():
            raise UsageError(f"{source}: not a folder (a byaldi index is one).")
        result = asdict(import_byaldi(Path(source), app.store(), model, wait_s))
    if app.as_json:
        app.print_json(result)
    app.terminal.info(f"{result['documents']} documents, {result['pages']} pages imported into {result.get('index', result.get('target'))}")


def _qdrant(app: Application, url: str):
    from ..core.errors import UsageError
    from ..index.open import open_store

    if not url.startswith(("qdrant://", "qdrants://", "qdrant+path://")):
        raise UsageError(f"{url}: expected a Qdrant store URL (qdrant://HOST:PORT/COLLECTION or qdrant+path://DIR/COLLECTION).")
    return app.keep(open_store(url, api_key=app.qdrant_api_key, pdf_store=app.pdf_store))


def _empty_target(target, out: str):
    """An export goes into a new or empty index: anything else is refused (exit 2, as byaldi's export)."""
    from ..core.errors import UsageError

    manifest = target.writable().read_manifest()  # another tool's collection is refused here
    if manifest is not None and (manifest.documents or manifest.in_progress):
        raise UsageError(f"export {out}: refused, it already holds an index of {len(manifest.documents)} documents; "
                         "nothing was changed.", hint="Export into a collection that does not exist yet.")
    return target


def _copy(app: Application, index, target, wait_s: float = 0.0) -> dict:
    from dataclasses import asdict

    from ..interop.transfer import copy_index

    return asdict(copy_index(index, target, wait_s))
