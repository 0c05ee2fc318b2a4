"""Where a page's words are: each token of its text with its box in fractions of the page as rendered.

A page's words are the tokens of its stored text (`text.split()`, whitespace-separated, in order), so
the words themselves are never stored twice: a token's box, its line and its line's block are. Boxes
are fractions of the page as it is rendered (pdftoppm's media box, after the page's /Rotate; an OCR
render's pixels), quantized to WORD_SCALE steps in uint16 (0.01 pt on a letter page). The text
layer's boxes come from pdftotext -bbox-layout (ingest/text.py), OCR's from Tesseract's TSV
(ingest/ocr.py); `align` maps what the tool found onto the tokens of the text it gave.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

WORD_SCALE = 65535  # a coordinate's steps across the page (uint16)
NO_LINE = 0xFFFF  # a token whose box is not known (the tool's words and its text disagree there)


@dataclass(frozen=True)
class FoundWord:
    """A word as a tool gives it: its text, its box (x0, y0, x1, y1 in page fractions), its line and block on the page."""

    text: str
    box: tuple[float, float, float, float]
    line: int
    block: int


@dataclass(frozen=True, eq=False)
class PageWords:
    """Each token of a page's text: its box (uint16 (n, 4): x0, y0, x1, y1 in 1/WORD_SCALE of the page), its
    line (uint16 (n,); NO_LINE: unknown), and each line's block (uint16 (lines,): a column's paragraph)."""

    boxes: np.ndarray
    lines: np.ndarray
    blocks: np.ndarray

    def __len__(self) -> int:
        return len(self.lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PageWords) and all(np.array_equal(a, b) for a, b in
                                                    ((self.boxes, other.boxes), (self.lines, other.lines), (self.blocks, other.blocks)))

    __hash__ = None  # type: ignore[assignment]  # arrays: not hashable

    def fractions(self) -> np.ndarray:
        """The boxes as float64 page fractions, (n, 4)."""
        return self.boxes.astype(np.float64) / WORD_SCALE


def empty_words() -> PageWords:
    return PageWords(np.zeros((0, 4), np.uint16), np.zeros(0, np.uint16), np.zeros(0, np.uint16))


def quantize(box: Sequence[float]) -> list[int]:
    return [int(round(min(1.0, max(0.0, value)) * WORD_SCALE)) for value in box]


def align(tokens: Sequence[str], found: Sequence[FoundWord]) -> PageWords:
    """The tokens of a page's text given the words a tool found: the same sequence (the usual case) maps one
    to one; where they differ (a hyphenated word joined, a ligature), the tokens take the words they stand for."""
    texts = [word.text for word in found]
    owners: list[list[int]] = [[] for _ in tokens]  # each token's words
    if texts == list(tokens):
        owners = [[index] for index in range(len(tokens))]
    else:
        matcher = difflib.SequenceMatcher(None, list(tokens), texts, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for offset in range(i2 - i1):
                    owners[i1 + offset] = [j1 + offset]
            elif tag == "replace":
                for offset in range(i2 - i1):
                    first = j1 + offset * (j2 - j1) // (i2 - i1)
                    last = j1 + (offset + 1) * (j2 - j1) // (i2 - i1)
                    owners[i1 + offset] = list(range(first, max(first + 1, last)))
    boxes = np.zeros((len(tokens), 4), np.uint16)
    lines = np.full(len(tokens), NO_LINE, np.uint16)
    line_ids: dict[tuple[int, int], int] = {}  # (block, line) as the tool numbers them -> this page's line
    blocks: list[int] = []
    for index, words in enumerate(owners):
        if not words:
            continue
        head = found[words[0]]
        same = [found[w] for w in words if found[w].line == head.line and found[w].block == head.block]
        key = (head.block, head.line)
        if key not in line_ids and len(blocks) >= NO_LINE:
            continue  # a hostile page's 65,535th line: its words stay without a box
        if key not in line_ids:
            line_ids[key] = len(blocks)
            blocks.append(head.block)
        boxes[index] = quantize((min(w.box[0] for w in same), min(w.box[1] for w in same),
                                 max(w.box[2] for w in same), max(w.box[3] for w in same)))
        lines[index] = line_ids[key]
    block_ids = {block: number for number, block in enumerate(dict.fromkeys(blocks))}
    return PageWords(boxes, lines, np.array([block_ids[b] for b in blocks], np.uint16))
