"""How big a page's text is, from a grey picture of it: the resolution OCR needs, or that it has none.

Tesseract reads text whose lines are about LINE_PX pixels high as well as it reads larger text, and
spends less the fewer pixels it is given (its layout analysis and each word's pixels scale with the
picture; its recogniser sees every line scaled to one height anyway). So a page is read at the
resolution that makes its text lines LINE_PX high rather than at a fixed 300 dpi.

Lines are found by row profiles in narrow vertical strips (so that columns and a slightly rotated
page still show separate lines): a run of rows with ink, between blank rows, neither too tall nor
too dense to be a line of print, whose rows cross several strokes (letters, not a shape's edge)
and whose ink is partly dark (not noise on a grey near the ink level). A page with no such run has
nothing for OCR to read: blank (a few specks at most) or a picture (ink, but no lines). Pale text
on a dark ground is looked for too. Measuring a 150 dpi page takes about 10 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

LINE_PX = 12.0  # the height of a line's ink (ascenders to descenders, about 3/4 of the type size) OCR reads well at: 10 pt at 110 dpi
MEASURE_DPI = 150  # a picture is measured at about this resolution
STRIP_INCHES = 0.7  # the width of the vertical strips a page's rows are profiled in (a few words of body text)
DARKEST = 50  # a page's darkest ink: its 50th darkest pixel (a one-word label has hundreds; a speck of dust a few)
GROUND = 90  # and its ground: the 90th percentile of its greys (light)
MIN_CONTRAST = 48  # a page whose ink is closer to its ground than this has none (paper's grain)
MIN_DARK = 0.05  # a line of print's ink is partly dark: under halfway from the ink level to the darkest (not noise's
                 # flicker on a grey near the ink level)
MIN_LINE_INCHES, MAX_LINE_INCHES = 0.025, 0.8  # a line of print: at least 4 px at 150 dpi, at most about 60 pt type
MAX_LINE_DENSITY = 0.6  # nor a band of rows more than 60 % inked (a photograph's dark area)
MIN_STROKES = 2.0  # and its rows cross letters' strokes: on average 2 or more ink runs a row in a strip (not a shape's edge)
BLANK_INK = 0.01  # a page with no line and less ink than this (specks) is blank, one with more a picture


@dataclass(frozen=True)
class TextSize:
    """What a picture shows: `lines` line runs found, their median height in pixels, and its ink."""

    lines: int
    line_px: float
    ink: float

    @property
    def kind(self) -> str:
        """text, blank, or picture (nothing for OCR to read)."""
        if self.lines:
            return "text"
        return "blank" if self.ink < BLANK_INK else "picture"

    def scale(self) -> float:
        """The factor that makes this text's lines LINE_PX high (1.0 where there is none)."""
        return LINE_PX / self.line_px if self.lines else 1.0


def measure(image: Image.Image, dpi: float) -> TextSize:
    """The text lines of a picture at `dpi` (any mode; dark print on light, or light on dark)."""
    factor = max(1, round(dpi / MEASURE_DPI))  # a finer picture is reduced first: a scan's grain averaged, 4 times quicker
    if factor > 1:
        size = measure(image.convert("L").reduce(factor), dpi / factor)
        return TextSize(size.lines, size.line_px * factor, size.ink)
    grey = np.asarray(image.convert("L")).astype(np.int16)
    if not grey.size:
        return TextSize(0, 0.0, 0.0)
    below = np.cumsum(np.bincount(grey.ravel(), minlength=256))  # pixels at each grey or darker
    darkest, lightest = int(np.searchsorted(below, DARKEST)), int(np.searchsorted(below, grey.size - DARKEST))
    ground, dark_ground = (int(np.searchsorted(below, grey.size * share)) for share in (GROUND / 100, 1 - GROUND / 100))
    inked = float((grey < (darkest + ground) / 2).mean()) if ground - darkest >= MIN_CONTRAST else 0.0
    strip, lines = max(8, round(STRIP_INCHES * dpi)), (max(3, round(MIN_LINE_INCHES * dpi)), round(MAX_LINE_INCHES * dpi))
    heights = _line_heights(grey, darkest, ground, strip, lines)
    if not len(heights):  # light print on a dark ground (a slide; a banner: narrower strips, some within it)
        heights = _line_heights(255 - grey, 255 - lightest, 255 - dark_ground, max(8, strip // 4), lines)
    if not len(heights):
        return TextSize(0, 0.0, inked)
    return TextSize(len(heights), float(np.median(heights)), inked)


def _line_heights(grey: np.ndarray, darkest: float, ground: float, width: int, lines: tuple[int, int]) -> np.ndarray:
    """The heights of the runs of inked rows (ink: darker than halfway from `ground` to `darkest`), in
    every strip `width` wide, that look like lines of print (between lines[0] and lines[1] rows high)."""
    rows, cols = grey.shape
    if ground - darkest < MIN_CONTRAST:
        return np.zeros(0)
    level = (darkest + ground) / 2
    ink, dark = grey < level, grey < (darkest + level) / 2
    count = cols // width
    if not count:
        width, count = cols, 1  # narrower than a strip: one
    cut = ink[:, : width * count]
    strips = cut.reshape(rows, count, width).sum(axis=2, dtype=np.int32)  # rows x strips: ink a row
    darks = dark[:, : width * count].reshape(rows, count, width).sum(axis=2, dtype=np.int32)
    starts_of_ink = np.zeros_like(cut)
    starts_of_ink[:, 1:] = cut[:, 1:] & ~cut[:, :-1]
    strokes = starts_of_ink.reshape(rows, count, width).sum(axis=2, dtype=np.int32)  # rows x strips: ink runs a row
    inked = strips > max(2, width // 100)  # a row with a speck or two is not inked
    edges = np.diff(np.pad(inked, ((1, 1), (0, 0))).astype(np.int8), axis=0)  # +1 where a run starts, -1 after it ends
    found: list[np.ndarray] = []
    for strip in range(count):
        starts, ends = np.flatnonzero(edges[:, strip] == 1), np.flatnonzero(edges[:, strip] == -1)
        heights = ends - starts
        density = _run_sums(strips[:, strip], starts, ends) / np.maximum(1, heights * width)
        crossed = _run_sums(strokes[:, strip], starts, ends) / np.maximum(1, heights)
        darkness = _run_sums(darks[:, strip], starts, ends) / np.maximum(1, _run_sums(strips[:, strip], starts, ends))
        keep = ((heights >= lines[0]) & (heights <= lines[1]) & (density <= MAX_LINE_DENSITY)
                & (crossed >= MIN_STROKES) & (darkness >= MIN_DARK))
        found.append(heights[keep])
    return np.concatenate(found)


def _run_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The sum of `values` over each run of rows starts[i]..ends[i] - 1."""
    cumulative = np.concatenate(([0], np.cumsum(values)))
    return cumulative[ends] - cumulative[starts]
