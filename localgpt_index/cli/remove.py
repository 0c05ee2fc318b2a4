"""lgpt-index remove"""

from __future__ import annotations

import os
import sys

import click

from ..core.errors import ExitCode
from .app import AppCommand, Application, error_object, output_options
from .options import SECONDS, display_path, index_options, tree_folders, typed_path


@click.command(cls=AppCommand)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--ignore", is_flag=True,
              help="Also add PATHS to the .lgptignore of the indexed folder, so that no later build or watch adds them back.")
@click.option("--wait", "wait_s", type=SECONDS, default=0.0, help="Seconds to wait for another writer to finish.")
@index_options
@output_options
@click.pass_obj
def remove(app: Application, paths, ignore, wait_s) -> None:
    """Remove documents from the index (a folder removes everything under it; a relative PATH from the
    current folder or from the indexed folder).

    The files themselves are not touched: while a file is in the indexed folder, the next build or
    watch indexes it again, unless --ignore (or a .lgptignore pattern) keeps it out.
    Exits 1 when none of PATHS is in the index.
    """
    from dataclasses import asdict

    from ..indexing.maintenance import remove_documents

    store = app.store()
    manifest = store.read_manifest()
    known = [d.path for d in [*manifest.documents, *manifest.in_progress]] if manifest is not None else []
    folders = tree_folders(known, app.index_dir_found()[0])
    found = [typed_path(path, known, folders) for path in paths]  # one from the current folder: as typed, for messages
    report = remove_documents(store, [p if f.rstrip(os.sep) == os.path.abspath(p) else f for p, f in zip(paths, found)], wait_s,
                              ignore=ignore)
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
    for written, patterns in report.ignored.items():
        app.terminal.info(f"added to {display_path(written)}: {', '.join(patterns)}")
        if written in report.ignored_above:  # the indexed folder itself (or one above it), ignored in the folder above
            app.terminal.warn(f"a build of the indexed folder does not read {display_path(written)}: it keeps them out of "
                              f"builds of {display_path(os.path.dirname(written))} or a folder above it.")
    if not report.ignored and any(os.path.exists(path) for path in report.removed):
        app.terminal.warn("the files are still in their folder: the next build or watch indexes them again; "
                          "`remove --ignore` (or a .lgptignore pattern) keeps them out.")
    sys.exit(int(ExitCode.OK if report.removed else ExitCode.FAILURE))
