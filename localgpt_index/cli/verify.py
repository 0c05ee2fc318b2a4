"""lgpt-index verify"""

from __future__ import annotations

import sys

import click

from ..errors import ExitCode
from .options import index_options, make_terminal, output_options, print_json, report_errors


@click.command()
@index_options
@output_options
@report_errors
def verify(index_dir, name, as_json, quiet, verbose) -> None:
    """Check the index: manifest, catalog against vectors, every checksum. Exits 1 on damage."""
    from ..store import IndexStore, index_path

    terminal = make_terminal(quiet, verbose)
    store = IndexStore(index_path(index_dir, name))
    problems = store.verify()
    if as_json:
        print_json({"index": str(store.root), "ok": not problems, "problems": problems})
    for problem in problems:
        terminal.error(problem)
    if not problems:
        terminal.info(f"{store.root}: ok")
    sys.exit(int(ExitCode.FAILURE if problems else ExitCode.OK))
