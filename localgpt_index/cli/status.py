"""lgpt-index status"""

from __future__ import annotations

import click

from .app import Application, output_options
from .options import display_path, index_options


@click.command()
@index_options
@output_options
@click.pass_obj
def status(app: Application, index_dir, name) -> None:
    """Show what the index holds: documents, pages, model, settings, size, failures."""
    from ..search import open_index

    index = open_index(index_dir, name)
    data = status_document(index)
    if app.as_json:
        app.print_json(data)
        return
    m = index.manifest
    click.echo(f"index       {data['index']} (generation {m.generation})")
    click.echo(f"documents   {data['documents']}, pages {data['pages']}, vectors {data['vectors']}")
    if data["in_progress"]:
        click.echo(f"in progress {data['in_progress']} long document(s), carried on by the next build")
    click.echo(f"model       {m.model.id} [{m.model.fingerprint}]")
    click.echo(f"built with  {m.settings.dtype} on {m.settings.device}, vectors {m.settings.vector_dtype} x {m.settings.dim}")
    click.echo(f"size        {data['size_bytes'] / 2**20:.1f} MiB")
    click.echo(f"last build  {data['last_build']}")
    if m.failures:
        click.echo(f"failed last time ({len(m.failures)}):")
        for f in m.failures:
            click.echo(f"  {display_path(f.path)}: {f.stage}: {f.reason}")


def status_document(index) -> dict:
    """The `status --json` document (localgpt_index/schemas/status.schema.json)."""
    import time

    m = index.manifest
    return {
        "index": str(index.store.root),
        "generation": m.generation,
        "documents": len(m.documents),
        "pages": m.page_count,
        "vectors": sum(s.rows for s in m.segments.values()),
        "in_progress": len(m.in_progress),
        "model": m.model.model_dump(),
        "settings": m.settings.model_dump(exclude_none=True),
        "size_bytes": index_size(index),
        "last_build": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(m.created)),
        "tool_version": m.tool_version,
        "format": m.format,
        "failures": [f.model_dump() for f in m.failures],
    }


def index_size(index) -> int:
    """Bytes of the files the current generation names (not what other generations keep)."""
    m = index.manifest
    total = sum(s.vectors_bytes for s in m.segments.values())
    pdfs = {d.pdf for d in [*m.documents, *m.in_progress] if d.pdf}
    for rel in pdfs:
        try:
            total += (index.store.root / rel).lstat().st_size
        except OSError:
            pass
    return total
