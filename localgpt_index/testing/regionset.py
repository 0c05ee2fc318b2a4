"""Planted facts at known places: text-layer PDFs, scanned PDFs and PNGs, each fact's box recorded as drawn.

For the text regions' test and benchmark (issue 44). Each page holds lines of filler words (scanset's
vocabulary) in one or two columns, and a few facts: a line of two made-up words found nowhere else and
a code ("the quorvex tamblin ledger KX-4821 stays open"), whose query is its two made-up words. Each
fact's box is where its line was drawn, in fractions of the page as it is rendered (0,0 its top left,
after the page's /Rotate). Among the text-layer pages: two columns, and pages with /Rotate 90 and 270
(their lines run down or up the rendered page); among the scans: two columns, and a sideways scan put
upright by /Rotate 90 (the way scanners store a page fed sideways). The same seed draws the same files.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from .scanset import FONTS, WORDS

SCAN_DPI = 200
PAGE_POINTS = (612.0, 792.0)  # US letter, portrait, before any /Rotate
MARGIN = 72.0
SYLLABLES = ("quor", "vex", "tam", "blin", "zor", "pel", "drim", "kast", "wub", "nix", "fral", "tesh", "grom", "yip",
             "lux", "sarn", "oth", "mib", "crell", "dov")
LETTERS = "BCDFGHKMNPRSTVXZ"


@dataclass(frozen=True)
class Fact:
    """A planted fact: where it is (file, 1-based page), what finds it, what its line says, and its box
    (x0, y0, x1, y1 in fractions of the rendered page); `scanned`: read by OCR."""

    file: str
    page: int
    query: str
    text: str
    box: tuple[float, float, float, float]
    scanned: bool


@dataclass(frozen=True)
class PageSpec:
    columns: int = 1
    rotate: int = 0  # the PDF page's /Rotate (text layer: the lines run across the rendered page; scans: a sideways scan put upright)
    facts: int = 3
    points: float = 10.0


TEXT_PDFS: dict[str, tuple[PageSpec, ...]] = {
    "memo.pdf": (PageSpec(), PageSpec(columns=2, points=9), PageSpec(rotate=90), PageSpec(points=12)),
    "ledger.pdf": (PageSpec(columns=2), PageSpec(rotate=270, points=11), PageSpec(facts=4, points=8), PageSpec(columns=2, points=11)),
    "notes.pdf": (PageSpec(facts=4), PageSpec(rotate=90, columns=2, points=9)),
}
SCANNED_PDFS: dict[str, tuple[PageSpec, ...]] = {
    "scan.pdf": (PageSpec(points=12), PageSpec(columns=2, points=11), PageSpec(rotate=90, points=12)),
}
PNGS: dict[str, PageSpec] = {"photo.png": PageSpec(points=12, facts=4), "columns.png": PageSpec(columns=2, points=12)}


class _Words:
    """Made-up words, each used once in the whole set."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set(WORDS)

    def word(self) -> str:
        while True:
            made = "".join(self.rng.choice(SYLLABLES) for _ in range(2))
            if made not in self.used:
                self.used.add(made)
                return made

    def fact(self) -> tuple[str, str]:
        """A fact's line and its query."""
        first, second = self.word(), self.word()
        code = f"{self.rng.choice(LETTERS)}{self.rng.choice(LETTERS)}-{self.rng.randint(1000, 9999)}"
        return f"the {first} {second} ledger {code} stays open", f"{first} {second}"


def _lines(count: int, rng: random.Random, words: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


def _layout(spec: PageSpec, width: float, height: float, leading: float, rng: random.Random, made: _Words
            ) -> list[tuple[float, float, str, str | None]]:
    """(left, top, the line, its query if a fact) of every line of a page `width` x `height` (any unit)."""
    column_width = (width - 2 * MARGIN * width / PAGE_POINTS[0]) / spec.columns
    rows = int((height - 2 * MARGIN * height / PAGE_POINTS[1]) // leading) - 1
    slots = [(column, row) for column in range(spec.columns) for row in range(rows)]
    facts = set(rng.sample([slot for slot in slots if slot[1] % 3 == 1], spec.facts))  # a filler line between two facts
    placed: list[tuple[float, float, str, str | None]] = []
    for column, row in slots:
        left = MARGIN * width / PAGE_POINTS[0] + column * column_width
        top = MARGIN * height / PAGE_POINTS[1] + row * leading
        if (column, row) in facts:
            text, query = made.fact()
            placed.append((left, top, text, query))
        else:
            placed.append((left, top, _lines(1, rng, 5 if spec.columns == 2 else 9)[0], None))
    return placed


def _text_page(canvas, spec: PageSpec, rng: random.Random, made: _Words, file: str, page: int) -> list[Fact]:
    """One text-layer page drawn on `canvas` (reportlab, points): its facts with their rendered boxes."""
    from reportlab.pdfbase.pdfmetrics import getAscent, getDescent, stringWidth

    width, height = PAGE_POINTS
    _page(canvas, width, height, spec.rotate)
    canvas.setFont("Helvetica", spec.points)
    ascent, descent = getAscent("Helvetica", spec.points), -getDescent("Helvetica", spec.points)
    facts = []
    for left, top, text, query in _layout(spec, width, height, spec.points * 1.6, rng, made):
        baseline = top + ascent
        canvas.drawString(left, height - baseline, text)
        if query is not None:
            box = (left, baseline - ascent, left + stringWidth(text, "Helvetica", spec.points), baseline + descent)
            facts.append(Fact(file, page, query, text, _rotated(box, width, height, spec.rotate), False))
    canvas.showPage()
    return facts


def _page(canvas, width: float, height: float, rotate: int) -> None:
    """The next page's media box `width` x `height` points and its /Rotate: reportlab swaps the size it is given
    for a page turned a quarter (so that the size given is the rendered page's), which the set does not want."""
    canvas.setPageSize((height, width) if rotate in (90, 270) else (width, height))
    canvas.setPageRotation(rotate)


def _rotated(box: tuple[float, float, float, float], width: float, height: float, rotate: int) -> tuple[float, float, float, float]:
    """A box (top-left origin, in the unrotated page's units) in fractions of the page rendered with /Rotate `rotate`."""
    x0, y0, x1, y1 = box
    if rotate == 90:  # clockwise: (x, y) -> (height - y, x) on a height x width page
        return ((height - y1) / height, x0 / width, (height - y0) / height, x1 / width)
    if rotate == 270:  # (x, y) -> (y, width - x)
        return (y0 / height, (width - x1) / width, y1 / height, (width - x0) / width)
    return (x0 / width, y0 / height, x1 / width, y1 / height)


def _scan(spec: PageSpec, rng: random.Random, made: _Words, file: str, page: int) -> tuple[Image.Image, list[Fact]]:
    """One scanned page, upright, and its facts' boxes (fractions of the picture)."""
    size = (round(PAGE_POINTS[0] / 72 * SCAN_DPI), round(PAGE_POINTS[1] / 72 * SCAN_DPI))
    picture = Image.new("L", size, 255)
    draw = ImageDraw.Draw(picture)
    font = ImageFont.truetype(FONTS["sans"], round(spec.points * SCAN_DPI / 72))
    facts = []
    for left, top, text, query in _layout(spec, size[0], size[1], spec.points * SCAN_DPI / 72 * 1.8, rng, made):
        draw.text((left, top), text, fill=0, font=font)
        if query is not None:
            x0, y0, x1, y1 = draw.textbbox((left, top), text, font=font)
            facts.append(Fact(file, page, query, text, (x0 / size[0], y0 / size[1], x1 / size[0], y1 / size[1]), True))
    return picture, facts


def _scanned_pdf(path: Path, specs: tuple[PageSpec, ...], rng: random.Random, made: _Words) -> list[Fact]:
    """Scans as an image-only PDF; a /Rotate 90 page holds its scan sideways (turned a quarter counter-clockwise)."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas as pdfcanvas

    pdf = pdfcanvas.Canvas(str(path), invariant=1)
    facts: list[Fact] = []
    for page, spec in enumerate(specs, 1):
        picture, found = _scan(spec, rng, made, path.name, page)
        facts += found
        width, height = PAGE_POINTS
        if spec.rotate == 90:
            picture, (width, height) = picture.rotate(90, expand=True), (height, width)
        buffer = io.BytesIO()
        picture.save(buffer, "PNG")
        _page(pdf, width, height, spec.rotate)
        pdf.drawImage(ImageReader(io.BytesIO(buffer.getvalue())), 0, 0, width, height)
        pdf.showPage()
    pdf.save()
    return facts


def make_region_set(folder: Path, seed: int = 44) -> list[Fact]:
    """Draw the set into `folder` (created; nothing else goes there) and return its facts."""
    from reportlab.pdfgen import canvas as pdfcanvas

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    made = _Words(rng)
    facts: list[Fact] = []
    for name, specs in TEXT_PDFS.items():
        pdf = pdfcanvas.Canvas(str(folder / name), invariant=1)
        for page, spec in enumerate(specs, 1):
            facts += _text_page(pdf, spec, rng, made, name, page)
        pdf.save()
    for name, specs in SCANNED_PDFS.items():
        facts += _scanned_pdf(folder / name, specs, rng, made)
    for name, spec in PNGS.items():
        picture, found = _scan(spec, rng, made, name, 1)
        picture.save(folder / name, dpi=(SCAN_DPI, SCAN_DPI))
        facts += found
    return facts


def iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Intersection over union of two boxes."""
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
