"""lgpt-index upgrade"""

from __future__ import annotations

import click

from .app import AppCommand, Application, output_options
from .options import SECONDS, index_options


@click.command(cls=AppCommand)
@click.option("--wait", "wait_s", type=SECONDS, default=0.0, help="Seconds to wait for another writer to finish.")
@index_options
@output_options
@click.pass_obj
def upgrade(app: Application, wait_s: float) -> None:
    """Write what an index made by an older version lacks, as one new generation.

    Today: the binary codes `query --first-pass` ranks by, for every segment without codes of the
    current version (built before they existed), read from the stored vectors; codes of version 2 get
    the block hashes a first pass checks them by as it reads them (not coded again); a text index of another
    analysis (case and accent folding, stems) is built again from the stored page text; word positions (the
    text regions of `query`) are read again from the text layers of pages indexed before they were kept (pages
    read by OCR get theirs with build --rebuild). Queries keep working
    meanwhile, and a kill leaves the old generation. Nothing else changes; a no-op when nothing is missing.
    One line a segment on stderr as it is done (none with --quiet).
    """
    from dataclasses import asdict

    from ..indexing.maintenance import upgrade_index

    def progress(number: int, total: int, segment, done: str, seconds: float) -> None:
        app.terminal.info(f"segment {number}/{total} ({segment.id}, {segment.pages} pages): {done} in {seconds:.1f} s")

    report = upgrade_index(app.store(), wait_s, progress)
    if app.as_json:
        app.print_json(asdict(report))
        return
    if report.upgraded:
        hashed = f", block hashes added in {report.segments_hashed}" if report.segments_hashed else ""
        text = "; the text index built again from the stored page text" if report.text_reindexed else ""
        words = (f"; word positions read for {report.pages_positioned} pages in {report.segments_positioned} segments"
                 if report.segments_positioned else "")
        app.terminal.info(f"{report.index}: binary codes written for {report.pages_coded} pages in {report.segments_coded} "
                          f"of {report.segments} segments{hashed}{text}{words} (generation {report.generation})")
    else:
        app.terminal.info(f"{report.index}: nothing to upgrade: {report.note} (generation {report.generation})")
