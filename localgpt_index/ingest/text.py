"""A page's text from the PDF's own text layer: poppler's pdftotext, one process per document.

pdftotext's default mode, not -layout: it gives the text in reading order (a two-column page
column after column), which is what a lexical index and an answerer want; -layout keeps the
physical layout, so the lines of two columns are interleaved (a sentence is cut by the other
column's words) and pages are padded with runs of spaces. Its output is UTF-8 (-enc UTF-8),
every page followed by a form feed (also an empty page): one process for a document's pages,
split on \\f. Like the renderer's poppler calls it runs with a timeout, in its own process group,
in the run's ProcessScope (ingest/processes.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .render import DEFAULT_RENDER_TIMEOUT_S, _run_poppler

TextSource = Literal["layer", "ocr", "none", "pending"]  # pending: its OCR is not read yet (a later commit brings it)

# --ocr auto: a page whose text layer has fewer visible (non-whitespace) characters than this is
# OCR'd. A scanned page often carries a little text of its own (a page number, a Bates stamp, a
# scanner's "Scanned with CamScanner": under 25), a page of prose has hundreds; a slide with only
# a title is OCR'd too, which costs a second and reads the text in its pictures.
OCR_MIN_CHARS = 32
MAX_PAGE_CHARS = 200_000  # a page's text is cut here (a hostile PDF can hold megabytes on one page)
TEXT_CHUNK = 500  # pages per pdftotext call: one call for all but the longest documents
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters but \t and \n


@dataclass(frozen=True)
class PageText:
    """A page's text and where it came from: the PDF's text layer, OCR, or none (pending: committed before
    its OCR was read, with its text layer so far)."""

    text: str = ""
    source: TextSource = "none"

    def extra(self) -> dict[str, str]:
        """What the store writer records beside the page's vectors."""
        return {"text": self.text, "text_source": self.source}


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


def pdf_page_texts(pdf: Path, first: int, last: int, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S) -> list[str]:
    """The text layer of pages first..last (1-based, inclusive): one pdftotext process (one per
    TEXT_CHUNK pages), each with `timeout_s`. A DocumentError if pdftotext is missing, too slow, or
    refuses the file; a page pdftotext gives nothing for is ""."""
    texts: list[str] = []
    for start in range(first, last + 1, TEXT_CHUNK):
        end = min(last, start + TEXT_CHUNK - 1)
        out, _ = _run_poppler(["pdftotext", "-enc", "UTF-8", "-f", str(start), "-l", str(end), os.path.abspath(pdf), "-"],
                              timeout_s, "its text layer" if (start, end) == (first, last) else f"the text layer of pages {start}-{end}")
        pages = out.decode("utf-8", "replace").split("\f")
        wanted = end - start + 1
        # every page ends with \f: wanted + 1 parts, the last empty; a damaged file may give fewer
        texts += [clean_page_text(page) for page in pages[:wanted]] + [""] * max(0, wanted - len(pages))
    return texts

