"""Ingest without process-global state: importing it patches nothing, an interrupt is a run's
own (a stopped ProcessScope stops nothing after it), and every way of calling poppler reports
its failures through one mapping. Fast tier: real poppler, and fake poppler tools on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docgen import make_pdf_of_shapes
from localgpt_index.core.errors import DocumentError
from localgpt_index.ingest import processes
from localgpt_index.ingest.render import PixelBudget, read_pdf_pages, render_page_at_dpi, render_pdf_pages

BUDGET = PixelBudget(max_pixels=768 * 28 * 28, min_pixels=4 * 28 * 28, cell=28)

IMPORTS_CHANGE_NOTHING = """
import warnings
import pdf2image.pdf2image as module
before_filters, before_module = list(warnings.filters), dict(vars(module))
import localgpt_index.ingest.render, localgpt_index.ingest.feed, localgpt_index.ingest.processes
changed = [name for name, value in vars(module).items() if before_module.get(name, object()) is not value]
assert not changed, f"pdf2image changed: {changed}"
assert warnings.filters == before_filters, f"warnings.filters changed: {warnings.filters[:3]}"
print("unchanged")
"""


def test_importing_the_ingest_modules_changes_neither_pdf2image_nor_the_warnings_filters():
    done = subprocess.run([sys.executable, "-c", IMPORTS_CHANGE_NOTHING], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "unchanged", done.stderr


def test_a_stopped_scope_does_not_stop_a_later_one():
    from localgpt_index.ingest.processes import ProcessScope, Stopped

    first = ProcessScope()
    running = first.start(["sleep", "60"])
    first.stop()
    assert running.wait(timeout=10) != 0 and running.interrupted
    with pytest.raises(Stopped):
        first.start(["true"])
    later = ProcessScope()
    proc = later.start(["true"])
    assert proc.wait(timeout=10) == 0 and not proc.interrupted and not later.stopped


def test_stopping_a_run_stops_the_scopes_under_it_and_no_other():
    from localgpt_index.ingest.processes import ProcessScope

    run, other = ProcessScope(), ProcessScope()
    with run.entered():
        feed = ProcessScope.under_current()
        assert processes.current() is run
    assert processes.current() is None
    inside, outside = feed.start(["sleep", "60"]), other.start(["sleep", "60"])
    assert run.running_count() == 1
    run.stop()
    assert inside.wait(timeout=10) != 0 and feed.stopped
    assert outside.poll() is None and not other.stopped
    other.stop()
    outside.wait(timeout=10)


def _pdf(tmp_path: Path, pages: int = 3) -> Path:
    return make_pdf_of_shapes(tmp_path / "shapes.pdf", [(612, 792, 0)] * pages)


def test_an_abandoned_feed_does_not_make_later_renders_fail(tmp_path):
    """A feed given up (the build renders again at another size, or a library caller stops
    reading) ends its own processes only: the next feed and a page for people still render."""
    from localgpt_index.ingest.discover import PDF
    from localgpt_index.ingest.events import PageReady
    from localgpt_index.ingest.feed import FeedSource, PageFeed

    pdf = _pdf(tmp_path, 6)
    sources = [FeedSource(pdf, PDF, pdf.stat().st_size)]
    abandoned = PageFeed(sources, converters=None, staging=tmp_path, render_size=(64, 64), queue_pages=1).start()
    abandoned.close()
    later = PageFeed(sources, converters=None, staging=tmp_path, render_size=(64, 64), queue_pages=1)
    assert [event.image.size for event in later if isinstance(event, PageReady)] == [(64, 64)] * 6
    assert render_page_at_dpi(pdf, 2, 36).size == (306, 396)  # 612 x 792 points at 36 dpi


@pytest.mark.parametrize("tool, failure, what, said, expected", [
    ("pdftoppm", "missing", "", "", "poppler's pdftoppm is not installed (apt-get install poppler-utils)"),
    ("pdfinfo", "timeout", "", "", "poppler's pdfinfo did not finish within 2 s and was stopped (see --render-timeout)"),
    ("pdftoppm", "timeout", "pages 1-8", "",
     "poppler's pdftoppm did not finish within 2 s (pages 1-8) and was stopped (see --render-timeout)"),
    ("pdfinfo", "failed", "this PDF", "Command Line Error: Incorrect password",
     "the PDF is encrypted and needs a password (poppler: Command Line Error: Incorrect password)"),
    ("pdftoppm", "failed", "pages 1-1", "Command Line Error:\n  Incorrect password",
     "the PDF is encrypted and needs a password (poppler: Command Line Error: Incorrect password)"),
    ("pdfinfo", "failed", "this PDF", "Syntax Error: page count 0", "the PDF has no pages"),
    ("pdftoppm", "failed", "pages 9-9", "Wrong page range given", "poppler failed on pages 9-9: Wrong page range given"),
    ("pdfinfo", "failed", "this PDF", "x" * 400, "poppler failed on this PDF: " + "x" * 300),
])
def test_the_poppler_error_mapping(tool, failure, what, said, expected):
    from localgpt_index.ingest.render import poppler_error

    error = poppler_error(tool, failure, what, said, timeout_s=2.0)
    assert isinstance(error, DocumentError) and error.stage == "render" and error.reason == expected


def _fake_poppler(tmp_path: Path, monkeypatch, script: str) -> None:
    """pdfinfo and pdftoppm replaced by `script` (first on PATH)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("pdfinfo", "pdftoppm"):
        (folder / tool).write_text("#!/bin/sh\n" + script)
        (folder / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


ENTRY_POINTS = {  # every way render.py runs poppler, each at a short timeout
    "page count": lambda pdf: read_pdf_pages(pdf, 0.5),
    "page count and sizes": lambda pdf: read_pdf_pages(pdf, 0.5, points=True),
    "pages at a budget (their sizes first)": lambda pdf: render_pdf_pages(pdf, BUDGET, 1, 1, 0.5),
    "pages at a fixed size": lambda pdf: render_pdf_pages(pdf, (64, 64), 1, 1, 0.5),
    "a page at a dpi": lambda pdf: render_page_at_dpi(pdf, 1, 50, 0.5),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_poppler_call_reports_an_encrypted_pdf_the_same_way(tmp_path, monkeypatch, entry):
    pdf = _pdf(tmp_path)
    _fake_poppler(tmp_path, monkeypatch, "echo 'Command Line Error: Incorrect password' >&2\nexit 1\n")
    with pytest.raises(DocumentError) as raised:
        ENTRY_POINTS[entry](pdf)
    assert raised.value.reason.startswith("the PDF is encrypted and needs a password"), raised.value.reason


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_poppler_call_reports_a_stuck_poppler_the_same_way(tmp_path, monkeypatch, entry):
    pdf = _pdf(tmp_path)
    _fake_poppler(tmp_path, monkeypatch, "exec sleep 60\n")
    with pytest.raises(DocumentError) as raised:
        ENTRY_POINTS[entry](pdf)
    assert raised.value.reason.startswith("poppler's ") and "within 0.5 s" in raised.value.reason
    assert raised.value.reason.endswith("and was stopped (see --render-timeout)"), raised.value.reason


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_poppler_call_reports_a_missing_poppler_the_same_way(tmp_path, monkeypatch, entry):
    pdf = _pdf(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(DocumentError) as raised:
        ENTRY_POINTS[entry](pdf)
    assert raised.value.reason in {f"poppler's {tool} is not installed (apt-get install poppler-utils)"
                                   for tool in ("pdfinfo", "pdftoppm")}
