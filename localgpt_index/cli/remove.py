"""lgpt-index remove"""

from __future__ import annotations

import sys

import click

from ..errors import ExitCode
from .options import display_path, index_options, make_terminal, output_options, print_json, report_errors


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--wait", "wait_s", type=float, default=0.0, help="Seconds to wait for another writer to finish.")
@index_options
@output_options
@report_errors
def remove(paths, wait_s, index_dir, name, as_json, quiet, verbose) -> None:
    """Remove documents from the index (a folder removes everything under it).

    The files themselves are not touched. Exits 1 when none of PATHS is in the index.
    """
    from dataclasses import asdict

    from ..remove import remove_documents
    from ..store import IndexStore, index_path

    terminal = make_terminal(quiet, verbose)
    report = remove_documents(IndexStore(index_path(index_dir, name)), list(paths), wait_s)
    if as_json:
        print_json(asdict(report))
    for path in report.removed:
        terminal.detail(f"removed: {display_path(path)}")
    for path in report.not_found:
        terminal.warn(f"not in the index: {display_path(path)}")
    terminal.info(f"{len(report.removed)} documents ({report.pages_removed} pages) removed from {report.index}")
    sys.exit(int(ExitCode.OK if report.removed else ExitCode.FAILURE))
