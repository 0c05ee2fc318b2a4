"""lgpt-index status"""

from __future__ import annotations

import click

from .app import AppCommand, Application, output_options
from .options import display_path, index_options
from .warm import warm_line


@click.command(cls=AppCommand)
@index_options
@output_options
@click.pass_obj
def status(app: Application) -> None:
    """Show what the index holds: documents, pages, model, settings, size, failures."""
    from ..interop.reports import status_document
    from ..query.search import open_index

    index = open_index(store=app.store())
    data = status_document(index.view)
    if app.as_json:
        app.print_json(data)
        return
    m = index.manifest
    click.echo(f"index       {data['index']} (generation {m.generation})")
    click.echo(f"documents   {data['documents']}, pages {data['pages']}, vectors {data['vectors']}")
    text = data["text"]
    unknown = (f", {text['unknown']} with no stored text (built before page text or with --text never; "
               "`build DOCS --rebuild --text auto` reads it)" if text["unknown"] else "")
    pending = (f", {text['pending']} with their text pending (searchable by their pixels; `build --text-only` reads it)"
               if text["pending"] else "")
    click.echo(f"text        {text['layer']} pages from their text layer, {text['ocr']} by OCR, {text['none']} without text"
               f"{pending}{unknown}")
    if data["in_progress"]:
        click.echo(f"in progress {data['in_progress']} long document(s), carried on by the next build")
    click.echo(f"model       {m.model.id} [{m.model.fingerprint}]")
    click.echo(f"built with  {m.settings.dtype} on {m.settings.device}, vectors {m.settings.vector_dtype} x {m.settings.dim}")
    click.echo(f"size        {data['size_bytes'] / 2**20:.1f} MiB")
    fp = data["first_pass"]
    uses = "uses it" if fp["auto_uses_it"] else ("the store ranks itself" if fp["path"] == "store" else "exact")
    click.echo(f"first pass  {fp['threshold']} ({fp['memory_bytes'] / 2**30:.1f} GiB here)")
    click.echo(f"            --first-pass auto here: {uses} ({fp['reason']}); binary codes in {fp['coded_segments']} "
               f"of {fp['segments']} segments")
    click.echo(f"last build  {data['last_build']}")
    if (warm := warm_line(app)) is not None:
        click.echo(f"warm        {warm}")
    if m.failures:
        click.echo(f"failed last time ({len(m.failures)}):")
        for f in m.failures:
            click.echo(f"  {display_path(f.path)}: {f.stage}: {f.reason}")
