"""lgpt-index ls"""

from __future__ import annotations

import click

from .app import AppCommand, Application, output_options
from .formats import Listing, cell, clean, format_option
from .options import display_path, index_options, tree_folders, typed_path


@click.command("ls", cls=AppCommand)
@click.argument("prefix", required=False, default="")
@click.option("--failed", is_flag=True, help="List the documents the last build could not index, with the reason.")
@index_options
@output_options
@format_option
@click.pass_obj
def ls(app: Application, prefix, failed) -> None:
    """List the documents in the index (those under PREFIX: a folder or the start of a path, from the
    current folder or from the indexed folder: `ls finance/` from the top, `ls .` from inside finance/)."""
    from ..interop.reports import documents_document
    from ..query.search import open_index
    from .formats import chosen_format, write

    fmt = chosen_format(app.output_format, app.as_json)
    view = open_index(store=app.store()).view
    if prefix:
        known = [f.path for f in view.manifest.failures] if failed else [d.path for d in view.manifest.documents]
        prefix = typed_path(prefix, known, tree_folders(known, app.index_dir_found()[0]), prefix=True)
    document = documents_document(view, prefix, failed)
    listing = _failures(document) if failed else _documents(document)
    write(fmt, listing, document, lambda: _print_table(document, failed), app.print_json)
    app.terminal.detail(f"{len(document['failures' if failed else 'documents'])} documents")


def _documents(document: dict) -> Listing:
    """One record a document: lines `path<TAB>pages<TAB>kind<TAB>text[<TAB>KEY=VALUE ...]`."""
    def line(doc: dict) -> str:
        fields = [clean(doc["path"]), str(doc["pages"]), doc["kind"], _text(doc["text"])]
        return "\t".join(fields + ([clean(_tags(doc))] if doc["metadata"] else []))

    columns = {"path": lambda doc: doc["path"], "pages": lambda doc: doc["pages"], "kind": lambda doc: doc["kind"],
               "text": lambda doc: _text(doc["text"]), "converter": lambda doc: doc["converter"], "metadata": _tags,
               "sha256": lambda doc: doc["sha256"]}
    return Listing(document["documents"], columns, line, paths=lambda doc: [doc["path"]])


def _failures(document: dict) -> Listing:
    """One record a failed document: lines `path<TAB>stage<TAB>reason`."""
    columns = {"path": lambda failure: failure["path"], "stage": lambda failure: failure["stage"],
               "reason": lambda failure: failure["reason"]}
    return Listing(document["failures"], columns, lambda failure: "\t".join(cell(value(failure)) for value in columns.values()),
                   paths=lambda failure: [failure["path"]])


def _print_table(document: dict, failed: bool) -> None:
    if failed:
        for failure in document["failures"]:
            click.echo(f"{display_path(failure['path'])}: {failure['stage']}: {failure['reason']}")
        return
    if document["documents"]:
        click.echo(f"{'pages':>5}  {'kind':<8}  {'text':<14}  path")
    for doc in document["documents"]:
        tags = _tags(doc)
        converter = f" via {doc['converter']}" if doc["converter"] else ""
        click.echo(f"{doc['pages']:>5}  {doc['kind']:<8}  {_text(doc['text']):<14}  {display_path(doc['path'])}{converter}"
                   f"{'  ' + tags if tags else ''}")


def _tags(doc: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(doc["metadata"].items()))


def _text(counts: dict[str, int]) -> str:
    """Where a document's page text came from: one word when every page agrees, else the counts (layer 3 ocr 1)."""
    found = {source: pages for source, pages in counts.items() if pages}
    if len(found) == 1:
        return next(iter(found))
    return " ".join(f"{source} {pages}" for source, pages in found.items()) or "-"
