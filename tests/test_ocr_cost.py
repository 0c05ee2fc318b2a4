"""OCR at half the cost for the same text (issue 41): each page read at the resolution its print needs,
a page with no line of print not read, Tesseract's library in a bounded process of ours. The measuring
is fast (in-process); real Tesseract on generated scans (localgpt_index/testing/scanset.py) is slow."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import build_json, committed_texts
from PIL import Image, ImageDraw

from localgpt_index.ingest.ocr import PROBE_DPI, OcrFailed, Tesseract, ocr_dpi
from localgpt_index.ingest.ocrbatch import ocr_pdf_pages
from localgpt_index.ingest.render import render_page_at_dpi
from localgpt_index.ingest.text import PageText
from localgpt_index.ingest.textsize import measure
from localgpt_index.testing.scanset import SCAN_DPI, PageSpec, draw_page

SMALL = (5.5, 3.0)  # inches: a few lines of each size (two columns of a few words), drawn in a few milliseconds


def _page(spec: PageSpec, seed: int = 1) -> tuple[Image.Image, str]:
    return draw_page(spec, random.Random(seed), SMALL)


def _at(image: Image.Image, dpi: int) -> Image.Image:
    scale = dpi / SCAN_DPI
    return image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.BOX)


def _rendered(image: Image.Image, folder: Path, dpi: int) -> Image.Image:
    """A scan as an image-only PDF page, rendered at `dpi` by pdftoppm as OCR's first render is."""
    pdf = folder / "scan.pdf"
    image.save(pdf, "PDF", resolution=SCAN_DPI)
    return render_page_at_dpi(pdf, 1, dpi)


@pytest.mark.parametrize(("spec", "low", "high"), [
    (PageSpec(points=8), 140, 170), (PageSpec(points=8, columns=2), 140, 170), (PageSpec(points=10), 100, 130),
    (PageSpec(points=11, degrees=1.2), 100, 120), (PageSpec(points=12, font="sans"), 100, 110), (PageSpec(points=14), 100, 100),
], ids=["8pt", "8pt-two-columns", "10pt", "11pt-rotated", "12pt", "14pt"])
def test_a_page_is_read_at_the_resolution_its_print_needs(spec, low, high, tmp_path):
    """Smaller print, finer: 10 pt at about 110 dpi instead of 300, 8 pt at about 150, 12 pt and over at 100; the same
    from the first render at 150 dpi (a PDF page) and from a 300 dpi scan's own pixels (an image)."""
    image, _ = _page(spec)
    from_probe = ocr_dpi(measure(_rendered(image, tmp_path, PROBE_DPI), PROBE_DPI), PROBE_DPI)
    from_scan = ocr_dpi(measure(image, SCAN_DPI), SCAN_DPI)
    assert low <= from_probe <= high and low <= from_scan <= high, (from_probe, from_scan)


def test_pages_without_a_line_of_print_are_told_from_pages_with_one():
    blank, picture, text = (_at(_page(PageSpec(kind=kind))[0], PROBE_DPI) for kind in ("blank", "picture", "text"))
    assert (measure(blank, PROBE_DPI).kind, measure(picture, PROBE_DPI).kind, measure(text, PROBE_DPI).kind) == ("blank", "picture", "text")
    banner = Image.new("L", (600, 200), 40)  # pale print on a dark ground
    ImageDraw.Draw(banner).text((20, 80), "Quarterly results 2024", fill=255, font_size=28)
    assert measure(banner, 100).kind == "text"


@pytest.mark.slow  # a build with its renders and a stand-in tesseract, and a letter-size picture drawn: seconds
def test_blank_and_picture_only_pages_are_not_given_to_tesseract(tmp_path, monkeypatch, fake_model):
    """A scanned PDF of a page of print, a blank page and a picture, and a picture-only PNG (a letter
    page's scan): Tesseract reads the page of print alone; the others are indexed without text, as
    Tesseract would leave them. (The texts as the index holds them at the end: OCR runs at a lower
    priority beside the encoder, so a page's text may land after its vectors.)"""
    docs, log = tmp_path / "docs", tmp_path / "tesseract.log"
    docs.mkdir()
    pages = [_page(PageSpec(kind=kind))[0] for kind in ("text", "blank", "picture")]
    pages[0].save(docs / "scan.pdf", "PDF", resolution=SCAN_DPI, save_all=True, append_images=pages[1:])
    draw_page(PageSpec(kind="picture"), random.Random(2))[0].save(docs / "photo.png")
    fake = tmp_path / "bin" / "tesseract"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
if [ "$1" = "--list-langs" ]; then printf 'List of available languages in "/x/" (1):\\neng\\n'; exit 0; fi
case "$1" in *.txt) cat "$1" >> {log}; while read -r f; do echo "Page 1 : $f" >&2; echo "read"; done < "$1";;
*) echo "$1" >> {log}; echo "read";; esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto")
    assert result.exit_code == 0, result.stderr
    assert [Path(line).name for line in log.read_text().splitlines()] == ["page-0.tif"]
    texts = {key: text for key, (text, _) in committed_texts(tmp_path / "idx").items()}
    assert texts == {("scan.pdf", 1): "read", ("scan.pdf", 2): "", ("scan.pdf", 3): "", ("photo.png", 1): ""}
    assert report["page_warnings"] == []


def test_the_library_reads_where_it_has_the_language_and_the_command_elsewhere():
    found = Tesseract.find()
    assert found is not None and found.tessdata, "the test machine has tesserocr (pyproject.toml) and Tesseract's eng"
    assert found.command("page.tif", "eng")[:2] == [sys.executable, "-I"]
    assert found.command("page.tif", "eng+xyz")[0] == found.path  # a language only the command may have
    assert Tesseract(found.path, found.languages).command("page.tif", "eng")[0] == found.path


def test_the_library_process_imports_tesserocr_from_where_this_process_finds_it(tmp_path, monkeypatch):
    """A tesserocr only PYTHONPATH names (`pip install --target`, as on a machine whose image lacks it): the
    library's process is isolated (`python -I`: no PYTHONPATH), so it is told that folder, and reads with it."""
    site, tessdata = tmp_path / "site", tmp_path / "tessdata"
    site.mkdir()
    tessdata.mkdir()
    (tessdata / "eng.traineddata").write_bytes(b"")
    (site / "tesserocr.py").write_text(
        "class PyTessBaseAPI:\n"
        "    def __init__(self, path, lang, psm): pass\n"
        "    def __enter__(self): return self\n"
        "    def __exit__(self, *exc): return False\n"
        "    def SetImageFile(self, picture): pass\n"
        "    def GetUTF8Text(self): return 'read by ' + __file__\n"
        "    def GetTSVText(self, page): return ''\n")
    monkeypatch.delitem(sys.modules, "tesserocr", raising=False)
    monkeypatch.syspath_prepend(str(site))
    found = Tesseract.find()
    assert found is not None and found.tesserocr_folder == str(site)
    command = Tesseract(found.path, found.languages, str(tessdata), found.tesserocr_folder).command(str(tmp_path / "page.tif"), "eng")
    done = subprocess.run(command, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.decode() == f"read by {site / 'tesserocr.py'}\x1e", done.stderr


def test_the_commands_rows_go_to_the_page_they_name_and_its_text_between_form_feeds():
    """`tesseract LIST stdout txt tsv` writes a page's TSV rows, then a form feed (but the first page's), then
    its text: the second page's rows come before the form feed that opens its text."""
    from localgpt_index.ingest.ocr import command_pages

    header = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n"
    rows = ["1\t{p}\t0\t0\t0\t0\t0\t0\t100\t200\t-1\t", "5\t{p}\t1\t1\t1\t1\t10\t20\t30\t10\t96.5\t{word}"]
    page = "\n".join(rows) + "\n"
    out = (header + page.format(p=1, word="Net") + "Net revenue\n\nup\n" + page.format(p=2, word="Other") + "\fOther page\n")
    first, second = command_pages(out)
    assert first.split("\x1e")[0].split() == ["Net", "revenue", "up"] and "\tNet" in first.split("\x1e")[1]
    assert second.split("\x1e")[0].split() == ["Other", "page"] and "\tOther" in second.split("\x1e")[1]
    assert "\tNet" not in second and "level" not in first
    read = Tesseract.clean(first)
    assert read.text == "Net revenue\n\nup" and read.words is not None and len(read.words) == 3


def _cer(true: str, read: str) -> float:
    from rapidfuzz.distance import Levenshtein

    true, read = " ".join(true.split()), " ".join(read.split())
    return Levenshtein.distance(true, read) / max(1, len(true))


@pytest.mark.slow  # real Tesseract on 3 scanned pages, three times over (seconds)
def test_measured_pages_read_as_well_as_at_300_dpi(tmp_path):
    """The character error rate of pages read at their measured resolution, by the library and by the
    command, is within 1 point of the same pages read at 300 dpi (and under 3 % on these scans)."""
    specs = [PageSpec(points=8, columns=2), PageSpec(points=11, degrees=1.2), PageSpec(points=12, font="sans", noise=0.06)]
    drawn = [_page(spec, seed) for seed, spec in enumerate(specs)]
    pdf = tmp_path / "scans.pdf"
    drawn[0][0].save(pdf, "PDF", resolution=SCAN_DPI, save_all=True, append_images=[image for image, _ in drawn[1:]])
    library = Tesseract.find()
    assert library is not None and library.tessdata
    command = Tesseract(library.path, library.languages)

    def cer(tesseract: Tesseract, fixed_dpi: int | None) -> tuple[float, list[PageText]]:
        texts: dict[int, PageText | OcrFailed] = {}
        ocr_pdf_pages(tesseract, [(pdf, page) for page in (1, 2, 3)], "eng", 120.0, 2048, texts.__setitem__, fixed_dpi=fixed_dpi)
        read = [texts[index] for index in range(3)]
        assert all(isinstance(text, PageText) for text in read), texts
        pages = [text for text in read if isinstance(text, PageText)]
        return _cer("\n".join(text for _, text in drawn), "\n".join(text.text for text in pages)), pages

    today, _ = cer(command, 300)
    (by_library, library_pages), (by_command, command_pages) = cer(library, None), cer(command, None)
    for measured in (by_library, by_command):
        assert measured <= today + 0.01 and measured < 0.03, (measured, today)
    # the command's word positions too (its TSV beside its text), each page its own: a page's first word where the library has it
    for ours, theirs in zip(command_pages, library_pages):
        assert ours.words is not None and theirs.words is not None and len(ours.words) == len(ours.text.split())
        assert abs(ours.words.fractions()[0] - theirs.words.fractions()[0]).max() < 0.01


@pytest.mark.slow  # real Tesseract's library in its process (seconds)
def test_the_library_process_answers_a_list_as_the_tesseract_command_does(tmp_path):
    """ocrbatch.py follows the library's process as it follows `tesseract` on a list: each page said on
    stderr as it starts, its text on stdout after a form feed, and a picture it cannot read fails the
    process there (the pages before it keep their text)."""
    image, _ = _page(PageSpec(points=12, font="sans"))
    good, bad = tmp_path / "good.tif", tmp_path / "bad.tif"
    _at(image, 120).save(good, dpi=(120, 120))
    bad.write_bytes(b"not a picture")
    listing = tmp_path / "pages.txt"
    listing.write_text(f"{good}\n{good}\n{bad}\n{good}\n")
    found = Tesseract.find()
    assert found is not None and found.tessdata
    done = subprocess.run(found.command(str(listing), "eng", listing=True), capture_output=True, timeout=120)
    said = done.stderr.decode()
    assert done.returncode == 1 and said.count("Page ") == 3 and "Error" in said, said
    first, second = done.stdout.decode().split("\f")
    assert first == second and len(first.split()) > 5


@pytest.mark.slow  # real Tesseract's library in its process, stopped (seconds)
def test_a_page_past_its_timeout_in_the_library_process_is_stopped(tmp_path):
    """The library's process is held to the page's --ocr-timeout like the command: stopped, its page
    failed, no process left behind."""
    image, _ = draw_page(PageSpec(points=8, columns=2), random.Random(3))
    pdf = tmp_path / "dense.pdf"
    image.save(pdf, "PDF", resolution=SCAN_DPI, save_all=True, append_images=[image])
    found = Tesseract.find()
    assert found is not None and found.tessdata
    results: dict[int, PageText | OcrFailed] = {}
    started = time.monotonic()
    ocr_pdf_pages(found, [(pdf, 1), (pdf, 2)], "eng", 0.6, 2048, results.__setitem__)
    assert time.monotonic() - started < 10
    assert all(isinstance(result, OcrFailed) and "0.6 s" in result.reason for result in results.values()), results
    assert not [child for child in psutil.Process().children(recursive=True) if "tesslib" in " ".join(child.cmdline())]
