"""lgpt-index status"""

from __future__ import annotations

import time

import click

from .options import display_path, index_options, output_options, print_json, report_errors


@click.command()
@index_options
@output_options
@report_errors
def status(index_dir, name, as_json, quiet, verbose) -> None:
    """Show what the index holds: documents, pages, model, settings, size, failures."""
    from ..search import open_index

    index = open_index(index_dir, name)
    m = index.manifest
    size = sum(p.stat().st_size for p in index.store.root.rglob("*") if p.is_file())
    data = {
        "index": str(index.store.root),
        "generation": m.generation,
        "documents": len(m.documents),
        "pages": m.page_count,
        "vectors": sum(s.rows for s in m.segments.values()),
        "model": m.model,
        "settings": m.settings,
        "size_bytes": size,
        "last_build": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(m.created)),
        "tool_version": m.tool_version,
        "failures": m.failures,
    }
    if as_json:
        print_json(data)
        return
    click.echo(f"index       {data['index']} (generation {m.generation})")
    click.echo(f"documents   {data['documents']}, pages {data['pages']}, vectors {data['vectors']}")
    click.echo(f"model       {m.model['id']} [{m.model['fingerprint']}]")
    settings = m.settings
    click.echo(f"built with  {settings.get('dtype')} on {settings.get('device')}, vectors {settings.get('vector_dtype')} x {settings.get('dim')}")
    click.echo(f"size        {size / 2**20:.1f} MiB")
    click.echo(f"last build  {data['last_build']}")
    if m.failures:
        click.echo(f"failed last time ({len(m.failures)}):")
        for f in m.failures:
            click.echo(f"  {display_path(f['path'])}: {f['stage']}: {f['reason']}")
