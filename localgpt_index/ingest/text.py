"""A page's text from the PDF's own text layer: poppler's pdftotext, one process per document.

pdftotext's reading order, not -layout: it gives the text in reading order (a two-column page
column after column), which is what a lexical index and an answerer want; -layout keeps the
physical layout, so the lines of two columns are interleaved (a sentence is cut by the other
column's words) and pages are padded with runs of spaces. It runs with -bbox-layout: each page's
flows, blocks, lines and words with their boxes (UTF-8 XHTML), from which the page's text is
written as its default mode writes it (a line's words joined by spaces, a line ended by a newline
unless it ends with a hyphen that joins it to the next in its flow, a blank line after each flow), and each
word's box kept (core/words.py): one process for a document's text and word positions. Its words are
placed on the page as rendered (after /Rotate) but its `<page>` gives the unturned media box: a page's
words show which way it is turned (poppler keeps only the words on the rendered page), and where they fit
both ways (a little text in a corner), one pdfinfo for the chunk says. Like the
renderer's poppler calls it runs with a timeout, in its own process group, in the run's
ProcessScope (ingest/processes.py).
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.words import FoundWord, PageWords, align
from ..core.errors import DocumentError
from .render import DEFAULT_RENDER_TIMEOUT_S, _page_points, _run_poppler

TextSource = Literal["layer", "ocr", "none", "pending"]  # pending: its OCR is not read yet (a later commit brings it)

# --ocr auto: a page whose text layer has fewer visible (non-whitespace) characters than this is
# OCR'd. A scanned page often carries a little text of its own (a page number, a Bates stamp, a
# scanner's "Scanned with CamScanner": under 25), a page of prose has hundreds; a slide with only
# a title is OCR'd too, which costs a second and reads the text in its pictures.
OCR_MIN_CHARS = 32
MAX_PAGE_CHARS = 200_000  # a page's text is cut here (a hostile PDF can hold megabytes on one page)
TEXT_CHUNK = 500  # pages per pdftotext call: one call for all but the longest documents
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters but \t and \n
# pdftotext -bbox-layout's elements read: a flow, block or line starting, or a word with its box and text
_ELEMENT = re.compile(rb'<(flow|block|line)\b|<word xMin="([^"]*)" yMin="([^"]*)" xMax="([^"]*)" yMax="([^"]*)">([^<]*)</word>')
_NUMBER = re.compile(rb'(\w+)="([-0-9.e+]+)"')
TOUCHING = 0.1  # a gap under this much of a word's height is no space between two words
_HYPHENS = ("-", "\u00ad", "\u2010", "\u2011")  # poppler joins a line ending with one to the next (TextLine.hyphenated)


@dataclass(frozen=True)
class PageText:
    """A page's text and where it came from: the PDF's text layer, OCR, or none (pending: committed before
    its OCR was read, with its text layer so far)."""

    text: str = ""
    source: TextSource = "none"
    words: PageWords | None = None  # each token's box (None: not known)

    def extra(self) -> dict[str, object]:
        """What the store writer records beside the page's vectors."""
        return {"text": self.text, "text_source": self.source, "words": self.words}


NO_TEXT = PageText()


def visible_chars(text: str) -> int:
    return sum(1 for char in text if not char.isspace())


def has_text_layer(text: str, min_chars: int = OCR_MIN_CHARS) -> bool:
    """Whether a text layer is usable as it is (--ocr auto reads the others)."""
    return visible_chars(text) >= min_chars


def clean_page_text(text: str) -> str:
    """A page's text as stored: control characters gone, line ends trimmed, cut at MAX_PAGE_CHARS."""
    text = _CONTROL.sub(" ", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n ")
    return text[:MAX_PAGE_CHARS]


def pdf_page_texts(pdf: Path, first: int, last: int, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S
                   ) -> list[tuple[str, PageWords | None]]:
    """The text layer of pages first..last (1-based, inclusive), each with its words' boxes (None: not known):
    one pdftotext process (one per TEXT_CHUNK pages), each with `timeout_s`. A DocumentError if pdftotext is
    missing, too slow, or refuses the file; a page pdftotext gives nothing for is ""."""
    texts: list[tuple[str, PageWords | None]] = []
    for start in range(first, last + 1, TEXT_CHUNK):
        end = min(last, start + TEXT_CHUNK - 1)
        out, _ = _run_poppler(["pdftotext", "-bbox-layout", "-enc", "UTF-8", "-f", str(start), "-l", str(end), os.path.abspath(pdf), "-"],
                              timeout_s, "its text layer" if (start, end) == (first, last) else f"the text layer of pages {start}-{end}")
        wanted = end - start + 1
        pages = [_parsed(page) for page in out.split(b"<page ")[1:][:wanted]]
        sides = [page.turned() for page in pages]
        if any(side is None for side in sides):  # words that fit the page either way: pdfinfo says
            told = _turned(pdf, start, start + len(pages) - 1, timeout_s)
            sides = [told[number] if side is None and told else side for number, side in enumerate(sides)]
        texts += [_layer(page, side) for page, side in zip(pages, sides)]
        texts += [_layer(_parsed(b""), None)] * (wanted - len(pages))  # a damaged file may give fewer
    return texts


def _turned(pdf: Path, first: int, last: int, timeout_s: float) -> list[bool] | None:
    """Whether each of pages first..last is turned a quarter (/Rotate 90 or 270); None: pdfinfo cannot say."""
    try:
        return [turned for _, _, turned in _page_points(pdf, first, last, timeout_s)]
    except DocumentError:
        return None


Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class _Page:
    """One page as pdftotext -bbox-layout gives it: its media box's size, and its blocks (each with its flow) of
    lines of words, with their boxes in points on the page as rendered (after /Rotate)."""

    width: float
    height: float
    blocks: list[tuple[int, list[list[tuple[str, Box]]]]]

    def turned(self) -> bool | None:
        """Whether the page is turned a quarter, where its words tell (poppler keeps only the words on the
        rendered page: words past the media box's width or height show which way it is); None: they fit both."""
        boxes = [box for _, block in self.blocks for line in block for _, box in line]
        if not boxes or self.width == self.height:
            return False
        right, bottom = max(box[2] for box in boxes), max(box[3] for box in boxes)
        upright = right <= self.width + 1 and bottom <= self.height + 1
        quarter = right <= self.height + 1 and bottom <= self.width + 1
        return None if upright == quarter else quarter


def _parsed(xml: bytes) -> _Page:
    """One page of pdftotext -bbox-layout's output (from after its `<page `)."""
    size = {key.decode(): float(value) for key, value in _NUMBER.findall(xml[: max(0, xml.find(b">"))])}
    blocks: list[tuple[int, list[list[tuple[str, Box]]]]] = []  # (its flow, its lines of words)
    flow = 0
    for match in _ELEMENT.finditer(xml):
        tag = match.group(1)
        if tag == b"flow":
            flow += 1
        elif tag == b"block" or (tag == b"line" and not blocks):
            blocks.append((flow, []))
        if tag == b"line":
            blocks[-1][1].append([])
        elif tag is None and blocks and blocks[-1][1]:
            text = match.group(6).decode("utf-8", "replace")
            try:
                box = (float(match.group(2)), float(match.group(3)), float(match.group(4)), float(match.group(5)))
            except ValueError:
                continue  # not a number: not a word we can place
            blocks[-1][1][-1].append((html.unescape(text) if "&" in text else text, box))
    return _Page(size.get("width", 0.0), size.get("height", 0.0), blocks)


def page_layer(xml: bytes, turned: bool | None) -> tuple[str, PageWords | None]:
    """One page of pdftotext -bbox-layout (from after its `<page `): its text as pdftotext's default mode
    writes it, cleaned as stored, and each token's box (`turned`: the page has /Rotate 90 or 270, so its
    rendered width is the media box's height; None: not known, no boxes)."""
    return _layer(_parsed(xml), turned)


def _layer(page: _Page, turned: bool | None) -> tuple[str, PageWords | None]:
    width, height = (page.height, page.width) if turned else (page.width, page.height)
    text, words = _written(page.blocks, width, height)
    return text, words if turned is not None and width > 0 and height > 0 else None


def _joined(line: list[tuple[str, Box]]) -> str:
    """A line's words as pdftotext writes them: a space between two, unless they touch (one word in two
    fonts: "(" and "const" -> "(const"; pdftotext's word spacing, which -bbox-layout does not write)."""
    out = line[0][0] if line else ""
    for (_, before), (text, box) in zip(line, line[1:]):
        gap = max(box[0] - before[2], before[0] - box[2], box[1] - before[3], before[1] - box[3])
        size = max(min(b[2] - b[0], b[3] - b[1]) for b in (before, box))
        out += (text if gap < TOUCHING * size else " " + text)
    return out


def _written(blocks: list[tuple[int, list[list[tuple[str, Box]]]]], width: float, height: float) -> tuple[str, PageWords]:
    """A page's blocks of lines of words as pdftotext's default mode writes them (TextPage::dump: a blank
    line after each flow, a hyphen at a line's end joining it to the next line of its flow), and the boxes."""
    out: list[str] = []
    found: list[FoundWord] = []
    lines = [(flow, number, line) for number, (flow, block) in enumerate(blocks) for line in block]
    for position, (flow, block, line) in enumerate(lines):
        out.append(_joined(line))
        found += [FoundWord(part, (box[0] / width, box[1] / height, box[2] / width, box[3] / height) if width > 0 and height > 0
                            else (0.0, 0.0, 0.0, 0.0), position, block) for text, box in line for part in text.split()]
        flow_goes_on = position + 1 < len(lines) and lines[position + 1][0] == flow
        if out[-1].endswith(_HYPHENS) and flow_goes_on:
            out[-1] = out[-1][:-1]  # joined to the next line, as pdftotext does
        else:
            out.append("\n")
        if not flow_goes_on:
            out.append("\n")
    text = clean_page_text("".join(out))
    return text, align(text.split(), found)
