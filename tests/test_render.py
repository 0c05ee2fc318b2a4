"""Pages rendered at the size the model's processor will use, each page at its own size where
the processor sizes its grid by area (the Qwen-VL families); poppler only, no model."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from PIL import Image

from docgen import PAGE_SHAPES, make_pdf_of_shapes
from localgpt_index.core.errors import DocumentError
from localgpt_index.ingest.render import PixelBudget, image_file_pages, render_pdf_pages

# colqwen2.5's processor: 768 cells of 28 px at most, 4 at least
BUDGET = PixelBudget(max_pixels=768 * 28 * 28, min_pixels=4 * 28 * 28, cell=28)


def test_each_page_comes_out_at_the_size_the_processor_gives_its_200_dpi_rendering(tmp_path):
    from pdf2image import convert_from_path

    pdf = make_pdf_of_shapes(tmp_path / "shapes.pdf")
    images = render_pdf_pages(pdf, BUDGET, 1, len(PAGE_SHAPES))
    plain = [im.size for im in convert_from_path(str(pdf))]  # 200 dpi, /Rotate applied
    expected = [BUDGET.fit(*size) for size in plain]
    assert [im.size for im in images] == expected
    for (width, height), (plain_width, plain_height) in zip(expected, plain):
        assert width % 28 == 0 and height % 28 == 0 and width * height <= BUDGET.max_pixels
        assert abs(width / height - plain_width / plain_height) < 0.1 * plain_width / plain_height  # proportions kept
    assert images[1].width > images[1].height  # the slide
    # a page alone comes out as it does among others
    assert render_pdf_pages(pdf, BUDGET, 3, 3)[0].size == expected[2]


def test_a_small_page_is_rounded_to_the_grid_not_blown_up_to_the_budget(tmp_path):
    pdf = make_pdf_of_shapes(tmp_path / "label.pdf", [(144, 72, 0)])  # 2 x 1 inches: 400 x 200 at 200 dpi
    assert render_pdf_pages(pdf, BUDGET, 1, 1)[0].size == (392, 196)


def test_the_long_side_and_fixed_sizes_are_as_before(tmp_path):
    pdf = make_pdf_of_shapes(tmp_path / "shapes.pdf")
    slide, receipt = render_pdf_pages(pdf, 1000, 2, 3)
    assert max(slide.size) == 1000 and max(receipt.size) == 1000
    assert {im.size for im in render_pdf_pages(pdf, (448, 448), 1, 5)} == {(448, 448)}


def test_pages_come_in_order_and_as_pdftoppm_draws_them_across_a_change_of_number_width(tmp_path, monkeypatch):
    """Rendered through files in a temporary folder: the same pixels as pdf2image's in-memory
    output, in page order where pdftoppm's file names go from one digit to two."""
    import numpy as np
    from pdf2image import convert_from_path

    from docgen import make_pdf

    pdf = make_pdf(tmp_path / "twelve.pdf", [f"Page {number}" for number in range(1, 13)])
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    ours = render_pdf_pages(pdf, 400, 3, 12)
    theirs = convert_from_path(str(pdf), size=400, first_page=3, last_page=12)
    assert len(ours) == 10
    for mine, reference in zip(ours, theirs):
        assert np.array_equal(np.asarray(mine), np.asarray(reference.convert("RGB")))
    assert not np.array_equal(np.asarray(ours[6]), np.asarray(ours[7]))  # pages 9 and 10
    assert not list((tmp_path / "tmp").iterdir())  # the folder is gone


def test_an_image_file_is_resized_once_to_the_processor_size(tmp_path):
    Image.new("RGB", (3000, 1000), "white").save(tmp_path / "wide.png")
    Image.new("RGB", (392, 196), "white").save(tmp_path / "exact.png")
    assert next(image_file_pages(tmp_path / "wide.png", BUDGET)).size == BUDGET.fit(3000, 1000)
    assert next(image_file_pages(tmp_path / "exact.png", BUDGET)).size == (392, 196)


@pytest.mark.parametrize("width, height, expected", [
    (1700, 2200, (672, 868)),     # letter at 200 dpi, over the budget
    (400, 200, (392, 196)),       # within it: rounded to the grid
    (20, 20, (56, 56)),           # under the minimum: scaled up to it
])
def test_the_budget_fit_is_the_processor_arithmetic(width, height, expected):
    assert BUDGET.fit(width, height) == expected


def test_a_page_without_a_size_is_a_render_error(tmp_path, monkeypatch):
    pdf = make_pdf_of_shapes(tmp_path / "shapes.pdf", [(612, 792, 0)])
    fake = tmp_path / "bin" / "pdfinfo"  # a pdfinfo that gives the page count and no page size
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Pages:          1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    with pytest.raises(DocumentError) as raised:
        render_pdf_pages(Path(pdf), BUDGET, 1, 1)
    assert raised.value.stage == "render" and "no size for page 1" in raised.value.reason


@pytest.mark.parametrize("size, pdftoppm_runs", [(BUDGET, 3), ((448, 448), 1)])
def test_a_pdf_in_the_feed_costs_one_pdfinfo_and_one_pdftoppm_per_run_of_equal_sizes(tmp_path, monkeypatch, size, pdftoppm_runs):
    """Every process start costs a few ms of CPU beside the model: the feed reads every page's size
    with the page count (one pdfinfo), and pdftoppm runs alone (pdf2image's convert_from_path would
    start pdfinfo and `pdftoppm -v` as well, each call)."""
    import os
    import shutil

    from localgpt_index.ingest.discover import PDF
    from localgpt_index.ingest.events import PageReady
    from localgpt_index.ingest.feed import FeedSource, PageFeed

    letter, slide = (612, 792, 0), (960, 540, 0)
    shapes = [letter, letter, slide, slide, letter]  # three runs of equal sizes under the budget
    pdf = make_pdf_of_shapes(tmp_path / "shapes.pdf", shapes)
    log, bin_dir = tmp_path / "started", tmp_path / "bin"  # each poppler start, logged by a wrapper on PATH
    bin_dir.mkdir()
    for tool in ("pdfinfo", "pdftoppm"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexec {shutil.which(tool)} "$@"\n')
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    feed = PageFeed([FeedSource(pdf, PDF, pdf.stat().st_size)], converters=None, staging=tmp_path, render_size=size,
                    queue_pages=8)
    images = [event.image for event in feed if isinstance(event, PageReady)]
    started = [line.split() for line in log.read_text().splitlines()]
    assert [args[0] for args in started] == ["pdfinfo"] + ["pdftoppm"] * pdftoppm_runs
    assert "-v" not in started[1]
    assert [im.size for im in images] == [im.size for im in render_pdf_pages(pdf, size, 1, len(shapes))]


def test_a_failing_or_missing_pdftoppm_is_a_render_error_that_says_why(tmp_path, monkeypatch):
    pdf = make_pdf_of_shapes(tmp_path / "shapes.pdf")
    with pytest.raises(DocumentError) as raised:
        render_pdf_pages(pdf, 400, 9, 9)  # past the last page: pdftoppm refuses, and says so on stderr
    assert raised.value.stage == "render" and raised.value.reason.startswith("poppler failed on pages 9-9: Wrong page range")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DocumentError) as raised:
        render_pdf_pages(pdf, 400, 1, 1)
    assert raised.value.reason == "poppler's pdftoppm is not installed (apt-get install poppler-utils)"
