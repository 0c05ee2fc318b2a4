"""A deterministic set of scanned pages with their true text, for OCR's tests and its benchmark.

Pages are drawn at SCAN_DPI like a flatbed scan of printed pages: body text at 8 to 14 pt in one or
two columns, a ruled table, a blank page and a picture-only page (a scan's speckles on both), a
slightly rotated page and a noisier one. They are saved as image-only PDFs (the pages' pictures, no
text layer) and a couple as PNGs; `truth` gives each page's text in reading order (columns one
after the other, a table row by row). The same seed draws the same pages, pixel for pixel.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

SCAN_DPI = 300
PAGE_INCHES = (8.5, 11.0)
LETTERS = "ABCDEFGHKLMNPRSTUVWXYZ"
MARGIN_IN = 0.9
FONTS = {"serif": "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
         "sans": "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf"}
WORDS = ("the annual report of the board shows that revenue grew in every region while costs were held "
         "steady by careful planning and the new warehouse opened in spring after a long delay caused by "
         "weather and supply problems customers asked for faster delivery and better service so the company "
         "hired more staff trained them well and measured results each month against clear targets "
         "inspection found minor defects which were repaired before shipment the committee approved the "
         "budget for next year including research travel equipment and a modest increase in salaries").split()


@dataclass(frozen=True)
class PageSpec:
    """One page to draw: its kind (text, table, blank, picture), text size, columns, rotation, noise."""

    kind: str = "text"
    points: float = 10.0
    font: str = "serif"
    columns: int = 1
    degrees: float = 0.0
    noise: float = 0.02


@dataclass
class ScanSet:
    """Where the set's files are, and each page's true text: {file name: [page 1's text, ...]}."""

    folder: Path
    truth: dict[str, list[str]] = field(default_factory=dict)
    specs: dict[str, list[PageSpec]] = field(default_factory=dict)


PDFS: dict[str, tuple[PageSpec, ...]] = {
    "report.pdf": (PageSpec(points=10), PageSpec(points=12, font="sans"), PageSpec(points=8, columns=2),
                   PageSpec(points=14, font="sans")),
    "mixed.pdf": (PageSpec(kind="table", points=10, font="sans"), PageSpec(kind="blank"), PageSpec(kind="picture"),
                  PageSpec(points=11, degrees=1.2), PageSpec(points=9, font="sans", noise=0.06)),
}
PNGS: dict[str, PageSpec] = {"photo-12pt.png": PageSpec(points=12, font="sans"), "photo-9pt.png": PageSpec(points=9)}


def make_scan_set(folder: Path, seed: int = 41) -> ScanSet:
    """Draw the set into `folder` (created): its PDFs, its PNGs, and their true text."""
    folder.mkdir(parents=True, exist_ok=True)
    made = ScanSet(folder)
    rng = random.Random(seed)
    for name, specs in PDFS.items():
        pages = [draw_page(spec, rng) for spec in specs]
        pages[0][0].save(folder / name, "PDF", resolution=SCAN_DPI, save_all=True, append_images=[image for image, _ in pages[1:]])
        made.truth[name], made.specs[name] = [text for _, text in pages], list(specs)
    for name, spec in PNGS.items():
        image, text = draw_page(spec, rng)
        image.save(folder / name, dpi=(SCAN_DPI, SCAN_DPI))
        made.truth[name], made.specs[name] = [text], [spec]
    return made


def draw_page(spec: PageSpec, rng: random.Random, inches: tuple[float, float] = PAGE_INCHES) -> tuple[Image.Image, str]:
    """One page's picture (grey, SCAN_DPI; a smaller page than a letter's for quick tests) and its true text."""
    size = (round(inches[0] * SCAN_DPI), round(inches[1] * SCAN_DPI))
    page = Image.new("L", size, 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype(FONTS[spec.font], round(spec.points * SCAN_DPI / 72))
    if spec.kind == "text":
        text = _draw_columns(draw, font, spec.columns, size, rng)
    elif spec.kind == "table":
        text = _draw_table(draw, font, size, rng)
    elif spec.kind == "picture":
        _draw_picture(draw, size, rng)
        text = ""
    else:
        text = ""
    if spec.degrees:
        page = page.rotate(spec.degrees, resample=Image.Resampling.BICUBIC, fillcolor=255)
    return _scanned(page, spec.noise, rng), text


def _sentence(rng: random.Random) -> list[str]:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
    if rng.random() < 0.4:  # a code, as planted facts are
        words.insert(rng.randrange(len(words)), _code(rng))
    if rng.random() < 0.3:
        words.append(str(rng.randint(2, 999)))
    words[0] = words[0].capitalize()
    return words[:-1] + [words[-1] + "."]


def _code(rng: random.Random) -> str:
    return f"{rng.choice(LETTERS)}{rng.choice(LETTERS)}-{rng.randint(1000, 9999)}"


def _draw_columns(draw: ImageDraw.ImageDraw, font: ImageFont.FreeTypeFont, columns: int, size: tuple[int, int],
                  rng: random.Random) -> str:
    margin, gap = round(MARGIN_IN * SCAN_DPI), round(0.35 * SCAN_DPI)
    width = (size[0] - 2 * margin - gap * (columns - 1)) // columns
    leading = round(font.size * 1.3)
    lines_each = (size[1] - 2 * margin) // leading
    texts = []
    for column in range(columns):
        left = margin + column * (width + gap)
        lines = _wrapped(font, width, lines_each, rng)
        for number, line in enumerate(lines):
            draw.text((left, margin + number * leading), line, fill=0, font=font)
        texts.append("\n".join(lines))
    return "\n".join(texts)


def _wrapped(font: ImageFont.FreeTypeFont, width: int, count: int, rng: random.Random) -> list[str]:
    """`count` lines of sentences, each as wide as fits in `width`, a paragraph break now and then."""
    lines: list[str] = []
    line: list[str] = []
    while len(lines) < count:
        for word in _sentence(rng):
            if line and font.getlength(" ".join([*line, word])) > width:
                lines.append(" ".join(line))
                line = []
            line.append(word)
        if rng.random() < 0.15 and line:
            lines.append(" ".join(line))
            line = []
    return lines[:count]


def _draw_table(draw: ImageDraw.ImageDraw, font: ImageFont.FreeTypeFont, size: tuple[int, int], rng: random.Random) -> str:
    margin = round(MARGIN_IN * SCAN_DPI)
    widths = [round(w * SCAN_DPI) for w in (1.6, 2.4, 1.2, 1.5)]
    row_h = round(font.size * 2.0)
    rows = [["Code", "Item", "Quantity", "Amount"]]
    for _ in range(22):
        rows.append([_code(rng), f"{rng.choice(WORDS)} {rng.choice(WORDS)}", str(rng.randint(1, 500)),
                     f"{rng.randint(10, 9999)}.{rng.randint(0, 99):02d}"])
    top = margin
    for number, row in enumerate(rows):
        left = margin
        for cell, width in zip(row, widths):
            draw.rectangle((left, top, left + width, top + row_h), outline=0, width=3)
            draw.text((left + 20, top + row_h // 4), cell, fill=0, font=font)
            left += width
        top += row_h
    return "\n".join(" ".join(row) for row in rows)


def _draw_picture(draw: ImageDraw.ImageDraw, size: tuple[int, int], rng: random.Random) -> None:
    """A photograph-like page: shaded bands and filled shapes, no text."""
    for y in range(0, size[1], 6):
        draw.rectangle((0, y, size[0], y + 6), fill=90 + round(120 * y / size[1]))
    for _ in range(14):
        x, y, r = rng.randrange(size[0]), rng.randrange(size[1]), rng.randint(80, 500)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=rng.randint(20, 230))


def _scanned(page: Image.Image, noise: float, rng: random.Random) -> Image.Image:
    """The page as a scanner gives it: slightly soft, grey noise, a few dark speckles."""
    pixels = np.asarray(page.filter(ImageFilter.GaussianBlur(0.7)), dtype=np.float64)
    noisy = np.random.default_rng(rng.randrange(2**32))
    pixels = pixels + noisy.normal(0.0, 255 * noise, pixels.shape)
    speckles = noisy.random(pixels.shape) < noise / 40
    pixels[speckles] = 40
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "L")
