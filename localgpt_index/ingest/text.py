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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..core.errors import DocumentError
from .render import DEFAULT_RENDER_TIMEOUT_S, PagePoints, _page_points, _run_poppler

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
# pdftotext -bbox-layout's words: each with its attributes (its box) and its text
_WORD = re.compile(rb'<word ([^>]*)>([^<]*)</word>')
_COORDINATE = rb'"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"'
_BOX = re.compile(rb'xMin=' + _COORDINATE + rb' yMin=' + _COORDINATE + rb' xMax=' + _COORDINATE + rb' yMax=' + _COORDINATE)
_BOX_FORM = b'xMin="" yMin="" xMax="" yMax=""'  # a word's attributes but their numbers, as poppler writes them
_NOT_ONE_WORD = re.compile(r"\s|\0\0")  # in the words joined by NULs, between two NULs: a word that is no one token
_NUMBER = re.compile(rb'(\w+)="([-0-9.e+]+)"')
TOUCHING = 0.1  # a gap under this much of a word's height is no space between two words
_BEFORE = ("", " ", "\n", "\n\n")  # what goes before a word (_written): nothing, a space, a line's end, a flow's end
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


def pdf_page_texts(pdf: Path, first: int, last: int, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S,
                   points: Sequence[PagePoints] | None = None) -> list[tuple[str, PageWords | None]]:
    """The text layer of pages first..last (1-based, inclusive), each with its words' boxes (None: not known):
    one pdftotext process (one per TEXT_CHUNK pages), each with `timeout_s`. A DocumentError if pdftotext is
    missing, too slow, or refuses the file; a page pdftotext gives nothing for is "". `points`: every page's
    size, where the document's opening read them (which pages are turned: no pdfinfo of its own; none or too few:
    pdfinfo asked where the words cannot tell)."""
    texts: list[tuple[str, PageWords | None]] = []
    for start in range(first, last + 1, TEXT_CHUNK):
        end = min(last, start + TEXT_CHUNK - 1)
        out, _ = _run_poppler(["pdftotext", "-bbox-layout", "-enc", "UTF-8", "-f", str(start), "-l", str(end), os.path.abspath(pdf), "-"],
                              timeout_s, "its text layer" if (start, end) == (first, last) else f"the text layer of pages {start}-{end}")
        wanted = end - start + 1
        pages = [_parsed(page) for page in out.split(b"<page ")[1:][:wanted]]
        sides = [page.turned() for page in pages]
        if any(side is None for side in sides):  # words that fit the page either way: pdfinfo says
            told = _turned(pdf, start, start + len(pages) - 1, timeout_s, points)
            sides = [told[number] if side is None and told else side for number, side in enumerate(sides)]
        texts += [_layer(page, side) for page, side in zip(pages, sides)]
        if len(pages) < wanted:  # a damaged file may give fewer
            texts += [_layer(_parsed(b""), None)] * (wanted - len(pages))
    return texts


def _turned(pdf: Path, first: int, last: int, timeout_s: float, points: Sequence[PagePoints] | None) -> list[bool] | None:
    """Whether each of pages first..last is turned a quarter (/Rotate 90 or 270), from `points` (every page's)
    or pdfinfo; None: pdfinfo cannot say."""
    if points is not None and len(points) >= last:  # (an image's, or a document opened elsewhere: none)
        return [turned for _, _, turned in points[first - 1 : last]]
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
    word_lines: np.ndarray  # (words,) int64
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
    """One page of pdftotext -bbox-layout's output (from after its `<page `): its words found at once, and each
    word's line and each line's flow and block told by the tags opened before it (`<line`, `<flow`, `<block`)."""
    import numpy as np

    size = {key.decode(): float(value) for key, value in _NUMBER.findall(xml[: max(0, xml.find(b">"))])}
    found: list[tuple[bytes, bytes]] = _WORD.findall(xml)
    marks = np.frombuffer(xml, np.uint8)
    opened = marks[np.flatnonzero(marks[:-1] == ord("<")) + 1]  # each tag's first letter (a page's tags: flow, block, line, word)
    line_opened = opened == ord("l")
    word_lines = np.cumsum(line_opened)[opened == ord("w")] - 1
    if len(word_lines) == len(found) and (not len(found) or word_lines[0] >= 0):
        lines = list(zip(np.cumsum(opened == ord("f"))[line_opened].tolist(), np.cumsum(opened == ord("b"))[line_opened].tolist()))
    else:  # (a word outside a line, or a tag the pattern does not take: line by line)
        found, word_lines, lines = _parsed_by_line(xml)
    attributes, texts = zip(*found) if found else ((), ())
    boxes, kept = _boxes(attributes)
    raw = list(texts)
    if kept is not None:  # (a word whose box is not in poppler's form: left out, as a word without a box)
        raw, word_lines = [text for text, keep in zip(texts, kept) if keep], word_lines[kept]
    text = b"\0".join(raw).decode("utf-8", "replace")
    words = (html.unescape(text) if "&" in text else text).split("\0") if raw else []
    if len(words) != len(raw):  # (a NUL in a word's text)
        words = [html.unescape(word.decode("utf-8", "replace")) for word in raw]
    return _Page(size.get("width", 0.0), size.get("height", 0.0), words, boxes, word_lines, lines)


def _parsed_by_line(xml: bytes) -> tuple[list[tuple[bytes, bytes]], np.ndarray, list[tuple[int, int]]]:
    """_parsed's words (attributes and text), their lines, and each line's flow and block, the page cut at its lines."""
    import numpy as np

    found: list[tuple[bytes, bytes]] = []
    counts: list[int] = []
    lines: list[tuple[int, int]] = []
    flow = block = 0
    for number, chunk in enumerate(xml.split(b"<line")):
        if number:  # line number - 1: its words (and what opens before the next line)
            own = _WORD.findall(chunk)
            found += own
            counts.append(len(own))
        flow, block = flow + chunk.count(b"<flow"), block + chunk.count(b"<block")
        lines.append((flow, block))
    lines.pop()  # (what the last chunk opens: no line follows)
    return found, np.repeat(np.arange(len(counts)), counts), lines


def _boxes(attributes: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray | None]:
    """Each word's box ((n, 4) float64 points: xMin, yMin, xMax, yMax) from its attributes, and which words have one
    (None: all). poppler writes each coordinate with six decimals: where every one is so written, they are read
    as integers of millionths (numpy reads those six times faster than floats), else each word's by the pattern."""
    import numpy as np

    joined = b" ".join(attributes)
    digits = joined.translate(None, b'xyMinMa=".')
    if joined.translate(None, b"0123456789-.") == b" ".join([_BOX_FORM] * len(attributes)) and joined.count(b"-") == joined.count(b'"-') \
            and not digits.translate(None, b"0123456789- "):
        places = np.frombuffer(joined, np.uint8)
        dots = np.flatnonzero(places == ord("."))
        if len(dots) == 4 * len(attributes) and (not len(dots) or (dots[-1] + 7 < len(places) and (places[dots + 7] == ord('"')).all())):
            return np.fromstring(digits, np.int64, sep=" ").reshape(-1, 4) / 1e6, None
    matched = [_BOX.fullmatch(item) for item in attributes]
    kept = np.array([match is not None for match in matched], bool)
    boxes = np.array([match.groups() for match in matched if match is not None], dtype=np.bytes_).astype(np.float64)
    return boxes.reshape(-1, 4), None if kept.all() else kept


def page_layer(xml: bytes, turned: bool | None) -> tuple[str, PageWords | None]:
    """One page of pdftotext -bbox-layout (from after its `<page `): its text as pdftotext's default mode
    writes it, cleaned as stored, and each token's box (`turned`: the page has /Rotate 90 or 270, so its
    rendered width is the media box's height; None: not known, no boxes)."""
    return _layer(_parsed(xml), turned)


def _layer(page: _Page, turned: bool | None) -> tuple[str, PageWords | None]:
    width, height = (page.height, page.width) if turned else (page.width, page.height)
    text, words = _written(page, width, height)
    return text, words if turned is not None and width > 0 and height > 0 else None


def _written(page: _Page, width: float, height: float) -> tuple[str, PageWords]:
    """A page's lines of words as pdftotext's default mode writes them (TextPage::dump: a line's words joined by a
    space unless they touch, a blank line after each flow, a hyphen at a line's end joining it to the next line of
    its flow), and the boxes. What goes before each word is worked out for all at once."""
    import numpy as np

    from ..core.words import aligned, neighbour_gaps

    words, lines = page.words, page.word_lines
    flows, blocks = (np.array([line[at] for line in page.lines] or [0], np.int64)[lines] for at in (0, 1))
    before = np.zeros(len(words), np.int64)  # an index into _BEFORE
    if len(words) > 1:
        gap, tallest = neighbour_gaps(page.boxes)
        before[1:] = np.where(lines[1:] != lines[:-1], np.where(flows[1:] != flows[:-1], 3, 2),
                              np.where(gap < TOUCHING * tallest, 0, 1))  # (touching: one word in two fonts, "(" "const")
    written = list(words)
    for at in np.flatnonzero(before == 2).tolist():  # a line that ends with a hyphen is joined to the next of its flow
        last = at - 1 if written[at - 1] else _last_written(written, lines, before, at)
        if last is not None and written[last].endswith(_HYPHENS):
            written[last], before[at] = written[last][:-1], 0
    parts = [""] * (2 * len(words))
    parts[0::2], parts[1::2] = [_BEFORE[code] for code in before.tolist()], written
    text = clean_page_text("".join(parts))
    scale = np.array([width, height, width, height]) if width > 0 and height > 0 else np.array([np.inf] * 4)
    tokens, of = text.split(), np.arange(len(words))
    if tokens != words and _NOT_ONE_WORD.search("\0".join(["", *words, ""])):  # (rare: a word holding a space, or none)
        # each part takes its word's box
        parts_of = [word.split() for word in words]
        words, of = [part for split in parts_of for part in split], np.repeat(of, [len(split) for split in parts_of])
    return text, aligned(tokens, words, page.boxes[of] / scale, lines[of], blocks[of])


def _last_written(written: list[str], lines: np.ndarray, before: np.ndarray, at: int) -> int | None:
    """The word whose last character ends the line before word `at` (an empty word writes nothing); None: the line
    ends with a space, or writes nothing."""
    line = lines[at - 1]
    for index in range(at - 1, -1, -1):
        if lines[index] != line:
            return None
        if written[index]:
            return index
        if before[index] == 1:  # (a space before an empty word ends its line)
            return None
    return None
