"""lgpt-index remove"""

from __future__ import annotations

import os
import sys

import click

from ..core.errors import ExitCode
from .app import Application, error_object, output_options
from .options import SECONDS, display_path, index_options


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--ignore", is_flag=True,
              help="Also add PATHS to the .lgptignore of the indexed folder, so that no later build or watch adds them back.")
@click.option("--wait", "wait_s", type=SECONDS, default=0.0, help="Seconds to wait for another writer to finish.")
@index_options
@output_options
@click.pass_obj
def remove(app: Application, paths, ignore, wait_s) -> None:
    """Remove documents from the index (a folder removes everything under it).

    The files themselves are not touched: while a file is in the indexed folder, the next build or
    watch indexes it again, unless --ignore (or a .lgptignore pattern) keeps it out.
    Exits 1 when none of PATHS is in the index.
    """
    from dataclasses import asdict

    from ..indexing.maintenance import remove_documents

    report = remove_documents(app.store(), list(paths), wait_s, ignore=ignore)
    if app.as_json:
        document = asdict(report)
        if not report.removed:
            document["error"] = error_object("none of PATHS is in the index; nothing was removed.", ExitCode.FAILURE,
                                             "not_found", "`lgpt-index ls` lists what the index holds.")
        app.print_json(document)
    for path in report.removed:
        app.terminal.detail(f"removed: {display_path(path)}")
    for path in report.not_found:
        app.terminal.warn(f"not in the index: {display_path(path)}")
    app.terminal.info(f"{len(report.removed)} documents ({report.pages_removed} pages) removed from {report.index}")
    if report.ignore_file:
        app.terminal.info(f"added to {display_path(report.ignore_file)}: {', '.join(report.ignored)}")
    elif any(os.path.exists(path) for path in report.removed):
        app.terminal.warn("the files are still in their folder: the next build or watch indexes them again; "
                          "`remove --ignore` (or a .lgptignore pattern) keeps them out.")
    sys.exit(int(ExitCode.OK if report.removed else ExitCode.FAILURE))
