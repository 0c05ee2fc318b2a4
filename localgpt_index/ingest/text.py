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
from typing import TYPE_CHECKING, Literal

from ..core.errors import DocumentError
from .render import DEFAULT_RENDER_TIMEOUT_S, _page_points, _run_poppler

if TYPE_CHECKING:  # numpy (and core/words, which needs it) are imported where words are read: importing ingest
    import numpy as np  # leaves the process as it was (numpy's import adds warning filters; tests/test_ingest_scope.py)

    from ..core.words import PageWords

TextSource = Literal["layer", "ocr", "none", "pending"]  # pending: its OCR is not read yet (a later commit brings it)

# --ocr auto: a page whose text layer has fewer visible (non-whitespace) characters than this is
# OCR'd. A scanned page often carries a little text of its own (a page number, a Bates stamp, a
# scanner's "Scanned with CamScanner": under 25), a page of prose has hundreds; a slide with only
# a title is OCR'd too, which costs a second and reads the text in its pictures.
OCR_MIN_CHARS = 32
MAX_PAGE_CHARS = 200_000  # a page's text is cut here (a hostile PDF can hold megabytes on one page)
TEXT_CHUNK = 500  # pages per pdftotext call: one call for all but the longest documents
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters but \t and \n
# pdftotext -bbox-layout's words: each with its box and text
_COORDINATE = rb'"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"'
_WORD = re.compile(rb'<word xMin=' + _COORDINATE + rb' yMin=' + _COORDINATE + rb' xMax=' + _COORDINATE + rb' yMax=' + _COORDINATE
                   + rb'>([^<]*)</word>')
_NOT_ONE_WORD = re.compile(r"\s|\0\0")  # in the words joined by NULs, between two NULs: a word that is no one token
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
        if len(pages) < wanted:  # a damaged file may give fewer
            texts += [_layer(_parsed(b""), None)] * (wanted - len(pages))
    return texts


def _turned(pdf: Path, first: int, last: int, timeout_s: float) -> list[bool] | None:
    """Whether each of pages first..last is turned a quarter (/Rotate 90 or 270); None: pdfinfo cannot say."""
    try:
        return [turned for _, _, turned in _page_points(pdf, first, last, timeout_s)]
    except DocumentError:
        return None


@dataclass(frozen=True)
class _Page:
    """One page as pdftotext -bbox-layout gives it: its media box's size; its words, each with its box in points
    on the page as rendered (after /Rotate) and its line; and each line's flow and block."""

    width: float
    height: float
    words: list[str]
    boxes: np.ndarray  # (words, 4) float64: xMin, yMin, xMax, yMax
    word_lines: list[int]
    lines: list[tuple[int, int]]  # (flow, block) of each line

    def turned(self) -> bool | None:
        """Whether the page is turned a quarter, where its words tell (poppler keeps only the words that start on
        the rendered page: one starting past the media box's width or height shows which way it is); None: they
        fit both ways (or neither)."""
        if not self.words or self.width == self.height:
            return False
        right, bottom = self.boxes[:, 0].max(), self.boxes[:, 1].max()
        upright = right <= self.width + 1 and bottom <= self.height + 1
        quarter = right <= self.height + 1 and bottom <= self.width + 1
        return None if upright == quarter else bool(quarter)


def _parsed(xml: bytes) -> _Page:
    """One page of pdftotext -bbox-layout's output (from after its `<page `): cut at its lines, each line's words
    found at once, the flows and blocks opened before each line counted."""
    import numpy as np

    size = {key.decode(): float(value) for key, value in _NUMBER.findall(xml[: max(0, xml.find(b">"))])}
    raw: list[bytes] = []
    numbers: list[bytes] = []
    word_lines: list[int] = []
    lines: list[tuple[int, int]] = []
    flow = block = 0
    for number, chunk in enumerate(xml.split(b"<line")):
        if number:  # line number - 1: its words (and what opens before the next line)
            found = _WORD.findall(chunk)
            for x0, y0, x1, y1, text in found:
                numbers += (x0, y0, x1, y1)
                raw.append(text)
            word_lines += [number - 1] * len(found)
        flow, block = flow + chunk.count(b"<flow"), block + chunk.count(b"<block")
        lines.append((flow, block))
    lines.pop()  # (what the last chunk opens: no line follows)
    text = b"\0".join(raw).decode("utf-8", "replace")
    words = (html.unescape(text) if "&" in text else text).split("\0") if raw else []
    if len(words) != len(raw):  # (a NUL in a word's text)
        words = [html.unescape(word.decode("utf-8", "replace")) for word in raw]
    boxes = np.array(numbers or [b"0"] * 0, dtype=np.bytes_).astype(np.float64).reshape(-1, 4)
    return _Page(size.get("width", 0.0), size.get("height", 0.0), words, boxes, word_lines, lines)


def page_layer(xml: bytes, turned: bool | None) -> tuple[str, PageWords | None]:
    """One page of pdftotext -bbox-layout (from after its `<page `): its text as pdftotext's default mode
    writes it, cleaned as stored, and each token's box (`turned`: the page has /Rotate 90 or 270, so its
    rendered width is the media box's height; None: not known, no boxes)."""
    return _layer(_parsed(xml), turned)


def _layer(page: _Page, turned: bool | None) -> tuple[str, PageWords | None]:
    width, height = (page.height, page.width) if turned else (page.width, page.height)
    text, words = _written(page, width, height)
    return text, words if turned is not None and width > 0 and height > 0 else None


def _spaced(page: _Page) -> list[str]:
    """What goes before each word: "" for a line's first, else a space, unless the two touch (one word in two
    fonts: "(" and "const" -> "(const", as pdftotext writes them; -bbox-layout does not say its word spacing)."""
    from ..core.words import neighbour_gaps

    boxes = page.boxes
    if len(boxes) < 2:
        return [""] * len(boxes)
    gap, height = neighbour_gaps(boxes)
    touching = (gap < TOUCHING * height).tolist()
    lines = page.word_lines
    return [""] + ["" if lines[i] != lines[i - 1] or touching[i - 1] else " " for i in range(1, len(lines))]


def _written(page: _Page, width: float, height: float) -> tuple[str, PageWords]:
    """A page's lines of words as pdftotext's default mode writes them (TextPage::dump: a blank line after each
    flow, a hyphen at a line's end joining it to the next line of its flow), and the boxes."""
    import numpy as np

    from ..core.words import aligned

    texts: list[list[str]] = [[] for _ in page.lines]
    for word, number, space in zip(page.words, page.word_lines, _spaced(page)):
        texts[number].append(space + word)
    lines = [(flow, "".join(parts)) for (flow, _), parts in zip(page.lines, texts) if parts]
    out: list[str] = []
    for position, (flow, line) in enumerate(lines):
        flow_goes_on = position + 1 < len(lines) and lines[position + 1][0] == flow
        if line.endswith(_HYPHENS) and flow_goes_on:
            out.append(line[:-1])  # joined to the next line, as pdftotext does
        else:
            out += [line, "\n"]
        if not flow_goes_on:
            out.append("\n")
    text = clean_page_text("".join(out))
    scale = np.array([width, height, width, height]) if width > 0 and height > 0 else np.array([np.inf] * 4)
    word_lines = np.array(page.word_lines, np.int64)
    blocks = np.array([block for _, block in page.lines] or [0], np.int64)[word_lines]
    words, of = page.words, np.arange(len(page.words))
    if _NOT_ONE_WORD.search("\0".join(["", *words, ""])):  # (rare: a word holding a space, or none) each part takes its word's box
        parts = [word.split() for word in words]
        words, of = [part for split in parts for part in split], np.repeat(of, [len(split) for split in parts])
    return text, aligned(text.split(), words, page.boxes[of] / scale, word_lines[of], blocks[of])
