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
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

WORD_SCALE = 65535  # a coordinate's steps across the page (uint16)
NO_LINE = 0xFFFF  # a token whose box is not known (the tool's words and its text disagree there)
MAX_ALIGNED = 5000  # tokens after the first difference between a text and a tool's words that are aligned (difflib: quadratic at worst)


class FoundWord(NamedTuple):
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
    # what readers derive from these words, kept with them (a page read again from the positions' cache is not
    # worked out again): index/text/regions.line_pieces; index/text/words.WordPositions bounds it
    derived: dict[str, object] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PageWords) and all(np.array_equal(a, b) for a, b in
                                                    ((self.boxes, other.boxes), (self.lines, other.lines), (self.blocks, other.blocks)))

    __hash__ = None  # type: ignore[assignment]  # arrays: not hashable

    def fractions(self) -> np.ndarray:
        """The boxes as float64 page fractions, (n, 4)."""
        return self.boxes.astype(np.float64) / WORD_SCALE


def neighbour_gaps(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each two boxes one after the other ((n, 4): x0, y0, x1, y1): the gap between them along whichever axis
    parts them most (negative where they overlap), and the larger of their heights (a box's shorter side: a
    word's height whichever way its line runs). Both (n - 1,)."""
    before, after = boxes[:-1], boxes[1:]
    gap = np.max(np.stack([after[:, 0] - before[:, 2], before[:, 0] - after[:, 2], after[:, 1] - before[:, 3],
                           before[:, 1] - after[:, 3]]), axis=0)
    sides = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
    return gap, np.maximum(sides[:-1], sides[1:])


def empty_words() -> PageWords:
    return PageWords(np.zeros((0, 4), np.uint16), np.zeros(0, np.uint16), np.zeros(0, np.uint16))


def align(tokens: Sequence[str], found: Sequence[FoundWord]) -> PageWords:
    """The tokens of a page's text given the words a tool found: the same sequence (the usual case) maps one
    to one; where they differ (a hyphenated word joined, a ligature), the tokens take the words they stand for."""
    boxes = np.array([word.box for word in found], np.float64).reshape(-1, 4)
    return aligned(tokens, [word.text for word in found], boxes, np.array([word.line for word in found], np.int64),
                   np.array([word.block for word in found], np.int64))


def aligned(tokens: Sequence[str], texts: list[str], boxes: np.ndarray, lines: np.ndarray, blocks: np.ndarray) -> PageWords:
    """`align` of words given as arrays: their texts, boxes ((n, 4) page fractions), lines and blocks ((n,) ints)."""
    keys = (blocks.astype(np.int64) << 32) | lines.astype(np.int64)
    first, several = _owners(tokens, texts)
    placed = np.zeros((len(tokens), 4), np.float64)
    has = first >= 0
    placed[has] = boxes[first[has]]
    for index, words in several.items():  # a token of several words: the union of those on its first word's line
        same = boxes[[w for w in words if keys[w] == keys[words[0]]]]
        placed[index] = (*same[:, :2].min(axis=0), *same[:, 2:].max(axis=0))
    numbered_lines = np.full(len(tokens), NO_LINE, np.uint16)
    if not has.any():
        return PageWords(np.zeros((len(tokens), 4), np.uint16), numbered_lines, np.zeros(0, np.uint16))
    quantized = np.rint(np.clip(placed, 0.0, 1.0) * WORD_SCALE).astype(np.uint16)
    ordered = keys[first[has]]
    if has.all() and len(ordered) < NO_LINE and (ordered[1:] >= ordered[:-1]).all():  # (the usual page: its lines and blocks in order)
        changed = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        line_blocks = ordered[np.concatenate([[0], changed])] >> 32
        numbered = np.zeros(len(ordered), np.int64)
        numbered[changed] = 1
        block_starts = np.zeros(len(line_blocks), np.int64)
        block_starts[1:] = line_blocks[1:] != line_blocks[:-1]
        return PageWords(quantized, np.cumsum(numbered).astype(np.uint16), np.cumsum(block_starts).astype(np.uint16))
    unique, where, inverse = np.unique(ordered, return_index=True, return_inverse=True)
    rank = np.empty(len(unique), np.int64)
    rank[np.argsort(where, kind="stable")] = np.arange(len(unique))  # lines numbered in reading order
    numbered = rank[inverse]
    kept = numbered < NO_LINE  # a hostile page's 65,535th line on: its words stay without a box
    numbered_lines[np.flatnonzero(has)[kept]] = numbered[kept]
    line_blocks = (unique[np.argsort(rank)] >> 32)[: NO_LINE]
    _, block_first, block_of = np.unique(line_blocks, return_index=True, return_inverse=True)
    block_rank = np.empty(len(block_first), np.int64)
    block_rank[np.argsort(block_first, kind="stable")] = np.arange(len(block_first))
    quantized[numbered_lines == NO_LINE] = 0
    return PageWords(quantized, numbered_lines, block_rank[block_of].astype(np.uint16))


def _owners(tokens: Sequence[str], texts: list[str]) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Each token's first word (an index into `texts`, -1: none) and the tokens of several words with all of theirs:
    one each while they agree, then difflib's alignment."""
    same = len(tokens) if len(tokens) == len(texts) and tokens == texts else \
        next((index for index, (a, b) in enumerate(zip(tokens, texts)) if a != b), min(len(tokens), len(texts)))
    first = np.full(len(tokens), -1, np.int64)
    first[:same] = np.arange(same)
    several: dict[int, list[int]] = {}
    if same < len(tokens) and max(len(tokens), len(texts)) - same <= MAX_ALIGNED:  # (past it, a hostile page's rest: no boxes)
        matcher = difflib.SequenceMatcher(None, list(tokens[same:]), texts[same:], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                first[same + i1: same + i2] = np.arange(same + j1, same + j2)
            elif tag == "replace":
                for offset in range(i2 - i1):
                    low = j1 + offset * (j2 - j1) // (i2 - i1)
                    high = max(low + 1, j1 + (offset + 1) * (j2 - j1) // (i2 - i1))
                    first[same + i1 + offset] = same + low
                    if high - low > 1:
                        several[same + i1 + offset] = list(range(same + low, same + high))
    return first, several
