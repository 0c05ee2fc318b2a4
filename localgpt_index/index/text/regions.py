"""Text regions: the lines of a page holding a query's matched terms, from the page's word positions.

A page's words are the tokens of its stored text (core/words.py); which of them match a query, and which
query term each matches, is the page's lexicon's business (lexicon.py: the query's words, stems, prefixes
and phrases, as the text query matches pages). The lines holding matches become regions: a line's box is the
union of its words' boxes (a line is cut where a gap between two words is wider than COLUMN_GAP times
their height: OCR may read two columns' lines as one), adjacent lines of one block that both match are
merged, and regions are ranked by the query's words (its units: lexicon.py) they hold, each weighed by its
rarity in the index, then by their matches a line; a region's score is its share of the query's weight. A
COMMON word (a question's "the" beside its "revenue") counts only on lines a heavier word holds: its lines
alone are no region and merge none. A region's text is its lines' words, REGION_WORDS at most: past that, a
merged block gives its lines from the one where its rarest word matches, a single long line the words around
that match (`…` where cut), so that a table cell or an answerer's prompt gets the sentence, not the paragraph.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import compress

import numpy as np

from ...core.types import Region
from ...core.words import NO_LINE, WORD_SCALE, PageWords, neighbour_gaps
from .lexicon import PageMatches

MAX_TEXT_REGIONS = 3  # a hit's text regions at most (query/regions.py keeps room for visual ones)
COLUMN_GAP = 1.5  # a gap between two words of a line wider than this many times their height parts two columns
REGION_WORDS = 32  # a region's text at most: whole lines, as many as fit
BEFORE = 4  # the words shown before the match of a line too long for REGION_WORDS
COMMON = 0.1  # a term weighing under this share of the page's heaviest ("the" beside "revenue") makes no region alone


def page_text_regions(matches: PageMatches, words: PageWords, limit: int = MAX_TEXT_REGIONS) -> list[Region]:
    """The regions of a query on a page: its matches there (QueryAnalysis.page) placed by the page's word positions
    `words`, best first."""
    lexicon, found, query = matches.lexicon, matches.found, matches.query
    if len(lexicon.tokens) != len(words) or not lexicon.tokens:
        return []  # positions of another text (not expected): no regions rather than wrong ones
    if not found:
        return []
    pieces = line_pieces(words)
    terms = list(found)
    units, weights, total = query.term_units(terms)
    ranked = sorted(_groups(found, terms, pieces, units, weights), reverse=True)  # best first; equal ones in reading order
    return [_region(group, terms, weights, matches, pieces, total or 1.0) for group in ranked[:limit]]


# matching lines first..last of one block, merged: (its units' weight, matches a line, -first, last, each term's matches),
# so that groups sort by their rank; a plain tuple (one is made for every group of matching lines of every hit)
_Group = tuple[float, float, int, int, list[int]]


def _groups(found: dict[str, set[int]], terms: list[str], pieces: LinePieces, units: list[int], weights: list[float]) -> list[_Group]:
    """The lines holding matched tokens (`terms`: `found`'s, in an order; each one's unit and its weight), consecutive ones
    of one block merged, each scored: the weight of the distinct units it holds, then its matches a line (a long merged
    block does not win by its length)."""
    of_token, blocks = pieces.of_token, pieces.blocks
    width = len(terms)
    alone = len(set(units)) == width  # each term a unit of its own (most queries)
    held = _held(found, terms, of_token, weights)
    held.append((len(blocks) + 1) * width)  # (past the last line: the last group closes in the loop)
    groups: list[_Group] = []
    first = last = -2
    counts: list[int] = []
    for code in held:
        line, term = divmod(code, width)
        if line != last:
            if line != last + 1 or blocks[line] != blocks[last]:
                if counts:
                    weight = sum(compress(weights, counts)) if alone else _units_weight(counts, units, weights)
                    groups.append((weight, sum(counts) / (last - first + 1), -first, last, counts))
                first, counts = line, [0] * width
            last = line
        counts[term] += 1
    return groups


def _held(found: dict[str, set[int]], terms: list[str], of_token: list[int], weights: list[float]) -> list[int]:
    """Each matched token with a line, as line * len(terms) + term, sorted; a COMMON term's only on the lines a heavier
    term holds: the lines of a question's "the" neither make regions of their own nor merge a paragraph into one
    (where every term weighs alike, none is common)."""
    width, floor = len(terms), COMMON * max(weights)
    telling = [term for term in range(width) if weights[term] >= floor]
    held = [line * width + term for term in telling for index in found[terms[term]] if (line := of_token[index]) >= 0]
    if len(telling) < width:
        lines = {code // width for code in held}
        held += [line * width + term for term in range(width) if weights[term] < floor
                 for index in found[terms[term]] if (line := of_token[index]) in lines]
    held.sort()
    return held


def _units_weight(counts: list[int], units: list[int], weights: list[float]) -> float:
    """The weight of the units a group holds (a word and its stem both there: the word once), summed in the units'
    order (equal sets sum alike)."""
    held = {unit: weight for unit, weight, count in zip(units, weights, counts) if count}
    return sum(held[unit] for unit in sorted(held))


@dataclass(frozen=True)
class LinePieces:
    """A page's lines cut into pieces, numbered in reading order: each token's piece (`of_token`, -1: no box), and
    each piece's block, box (the union of its tokens', in WORD_SCALE steps) and tokens. Plain lists: a query reads
    a few items of each (and a page's pieces are worked out with no object a piece)."""

    of_token: list[int]
    blocks: list[int]
    boxes: list[tuple[int, int, int, int]]
    placed: list[int]  # the tokens with a box, in order: a piece's tokens are placed[starts[piece]: starts[piece + 1]]
    starts: list[int]
    texts: dict[int, str] = field(default_factory=dict, compare=False)  # a piece's words, joined (as met)

    def text(self, piece: int, tokens: list[str]) -> str:
        """The words of a piece, in reading order (`tokens`: the page's, as its lexicon has them)."""
        found = self.texts.get(piece)
        if found is None:
            found = self.texts[piece] = " ".join([tokens[index] for index in self.placed[self.starts[piece]: self.starts[piece + 1]]])
        return found


def line_pieces(words: PageWords) -> LinePieces:
    """A page's line pieces: a line is cut where two of its words (one after the other) stand further apart than
    COLUMN_GAP times their height. Worked out once for a page's words (kept in `words.derived`)."""
    found = words.derived.get("line_pieces")
    if not isinstance(found, LinePieces):
        found = words.derived["line_pieces"] = _line_pieces(words)
    return found


def _line_pieces(words: PageWords) -> LinePieces:
    pieces = np.full(len(words), -1, np.int64)
    known = np.flatnonzero(words.lines != NO_LINE)
    if not len(known):
        return LinePieces(pieces.tolist(), [], [], [], [0])
    lines = words.lines[known].astype(np.int64)
    held = words.boxes[known].astype(np.int32)
    gap, height = neighbour_gaps(held)
    starts = np.concatenate([[True], (lines[1:] != lines[:-1]) | (gap > COLUMN_GAP * height)])
    pieces[known] = np.cumsum(starts) - 1
    block_of = words.blocks.astype(np.int64)
    first_lines = lines[starts]
    blocks = np.where(first_lines < len(block_of), block_of[np.minimum(first_lines, max(len(block_of) - 1, 0))], -1) \
        if len(block_of) else np.full(len(first_lines), -1)
    at = np.flatnonzero(starts)  # each piece's first placed token: its tokens follow it until the next one's
    boxes = np.concatenate([np.minimum.reduceat(held[:, :2], at), np.maximum.reduceat(held[:, 2:], at)], axis=1)
    return LinePieces(pieces.tolist(), blocks.tolist(), [tuple(box) for box in boxes.tolist()],
                      known.tolist(), [*at.tolist(), len(known)])


def _region(group: _Group, terms: list[str], weights: list[float], matches: PageMatches, pieces: LinePieces, total: float) -> Region:
    """A group's box (its lines' union), score (its units' share of the query's weight), terms (in the query's order)
    and words."""
    weight, _, first, last, counts = group
    first = -first
    if first == last:
        x0, y0, x1, y1 = pieces.boxes[first]
    else:
        left, top, right, bottom = zip(*pieces.boxes[first: last + 1])
        x0, y0, x1, y1 = min(left), min(top), max(right), max(bottom)
    matched = [term for term, count in zip(terms, counts) if count]
    if len(matched) > 1:
        matched.sort(key=matches.query.order.__getitem__)
    starts = pieces.starts
    if starts[last + 1] - starts[first] <= REGION_WORDS:  # (most: all its words)
        text = pieces.text(first, matches.lexicon.tokens) if first == last else \
            " ".join([pieces.text(piece, matches.lexicon.tokens) for piece in range(first, last + 1)])
    else:
        # the heaviest held term: a word before a prefix of the same weight, then the first
        heaviest = max(compress(range(len(terms)), counts), key=lambda term: (weights[term], not terms[term].endswith("*")))
        text = _cut(first, last, pieces, matches, terms[heaviest])
    return Region((x0 / WORD_SCALE, y0 / WORD_SCALE, x1 / WORD_SCALE, y1 / WORD_SCALE), "text",
                  round(weight / total, 4), tuple(matched), text)


def _cut(first: int, last: int, pieces: LinePieces, matches: PageMatches, term: str) -> str:
    """REGION_WORDS of the words of lines `first`..`last`: from the line where `term` (the heaviest the lines hold)
    first matches, as many whole lines as fit; that line alone too long, its words from BEFORE words before the
    match. `…` where words are left out."""
    starts, placed, tokens, of_token = pieces.starts, pieces.placed, matches.lexicon.tokens, pieces.of_token
    low, high = placed[starts[first]], placed[starts[last + 1] - 1]
    match = min(index for index in matches.found[term] if low <= index <= high and of_token[index] >= 0)  # (a token with no box: no line)
    line = of_token[match]
    end = bisect_right(starts, starts[line] + REGION_WORDS, line + 1, last + 2) - 1  # lines line..end - 1 fit
    if end > line:
        shown = " ".join([pieces.text(piece, tokens) for piece in range(line, end)])
        return ("… " if line > first else "") + shown + (" …" if end <= last else "")
    held = placed[starts[line]: starts[line + 1]]
    at = max(0, min(bisect_left(held, match) - BEFORE, len(held) - REGION_WORDS))
    shown = " ".join([tokens[index] for index in held[at: at + REGION_WORDS]])
    return ("… " if at or line > first else "") + shown + (" …" if at + REGION_WORDS < len(held) or line < last else "")
