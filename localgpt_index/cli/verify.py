"""lgpt-index verify"""

from __future__ import annotations

import sys

import click

from ..core.errors import ExitCode
from .app import AppCommand, Application, error_object, output_options
from .options import index_options


@click.command(cls=AppCommand)
@index_options
@output_options
@click.pass_obj
def verify(app: Application) -> None:
    """Check the index: manifest, catalog against vectors, every checksum. Exits 1 on damage."""
    store = app.store()
    problems = store.verify()
    notes = store.verify_notes()
    if app.as_json:
        document = {"index": store.location, "ok": not problems, "problems": problems}
        if notes:
            document["notes"] = notes
        if problems:
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            document["error"] = error_object(f"{problems[0]}{more}", ExitCode.FAILURE, "index")
        app.print_json(document)
    for problem in problems:
        app.terminal.error(problem)
    for note in notes:
        app.terminal.info(f"note: {note}")
    if not problems:
        app.terminal.info(f"{store.location}: ok")
    sys.exit(int(ExitCode.FAILURE if problems else ExitCode.OK))
