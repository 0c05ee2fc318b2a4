"""lgpt-index verify"""

from __future__ import annotations

import sys

import click

from ..errors import ExitCode
from .app import Application, output_options
from .options import index_options


@click.command()
@index_options
@output_options
@click.pass_obj
def verify(app: Application) -> None:
    """Check the index: manifest, catalog against vectors, every checksum. Exits 1 on damage."""
    store = app.store()
    problems = store.verify()
    if app.as_json:
        app.print_json({"index": store.location, "ok": not problems, "problems": problems})
    for problem in problems:
        app.terminal.error(problem)
    if not problems:
        app.terminal.info(f"{store.location}: ok")
    sys.exit(int(ExitCode.FAILURE if problems else ExitCode.OK))
