"""Text regions: the lines of a page holding a query's matched terms, from the page's word positions.

A page's words are the tokens of its stored text (core/words.py). A token matches the query as the text
query matches pages (index/text/query.py, tokenize.py): one of its exact (folded) tokens is a query word,
or its stem in the document's language is one of the query's stems, or it starts with a query prefix
(phrase words match as words). The lines holding matches become regions: a line's box is the union of
its words' boxes (a line is cut where a gap between two words is wider than COLUMN_GAP times their
height: OCR may read two columns' lines as one), adjacent lines of one block that both match are merged,
and regions are ranked by the distinct query terms they hold, then by their matches a line. The words
in a region are its text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...core.types import Region
from ...core.words import NO_LINE, PageWords
from .query import TextQuery
from .tokenize import exact_tokens, fold, stems

MAX_TEXT_REGIONS = 5
COLUMN_GAP = 1.5  # a gap between two words of a line wider than this many times their height parts two columns


@dataclass
class _Lines:
    """Consecutive matching lines of one block, merged: their numbers, terms and matches."""

    lines: list[int]
    block: int
    terms: dict[str, int] = field(default_factory=dict)  # term -> matches

    @property
    def score(self) -> tuple[int, float]:
        """Distinct terms, then matches a line (a long merged block does not win by its length)."""
        return len(self.terms), sum(self.terms.values()) / len(self.lines)


def matched_terms(tokens: list[str], query: TextQuery, language: str | None) -> list[list[str]]:
    """Each token's query terms (the query word, stem or prefix* it matches; [] for none). Only the tokens whose
    folded text holds a term's start are analysed (a stem keeps its word's start but for its last letter)."""
    exact, stemmed = set(query.exact), set(query.stemmed) | set(query.exact)
    starts = tuple({term[:-1] if len(term) > 3 else term for term in stemmed} | set(query.prefixes))
    found: list[list[str]] = []
    for token in tokens:
        if not starts or not any(start in fold(token) for start in starts):
            found.append([])
            continue
        parts = exact_tokens(token)
        terms = [part for part in parts if part in exact]
        terms += [stem for stem in stems([p for p in parts if p not in exact], language) if stem in stemmed]
        terms += [f"{prefix}*" for prefix in query.prefixes if any(part.startswith(prefix) for part in parts)]
        found.append(list(dict.fromkeys(terms)))
    return found


def page_text_regions(text: str, words: PageWords, query: TextQuery, language: str | None,
                      limit: int = MAX_TEXT_REGIONS) -> list[Region]:
    """The regions of `query` on a page whose text is `text` and word positions `words`, best first."""
    tokens = text.split()
    if len(tokens) != len(words) or not tokens:
        return []  # positions of another text (not expected): no regions rather than wrong ones
    terms = matched_terms(tokens, query, language)
    pieces, blocks = line_pieces(words)
    by_line: dict[int, dict[str, int]] = {}
    for line, found in zip(pieces.tolist(), terms):
        if found and line >= 0:
            for term in found:
                by_line.setdefault(line, {}).setdefault(term, 0)
                by_line[line][term] += 1
    groups: list[_Lines] = []
    for line in sorted(by_line):
        block = blocks[line]
        last = groups[-1] if groups else None
        if last is not None and last.block == block and last.lines[-1] == line - 1:
            last.lines.append(line)
        else:
            groups.append(last := _Lines([line], block))
        for term, count in by_line[line].items():
            last.terms[term] = last.terms.get(term, 0) + count
    groups.sort(key=lambda group: group.score, reverse=True)
    return [_region(group, tokens, words, pieces) for group in groups[:limit]]


def line_pieces(words: PageWords) -> tuple[np.ndarray, list[int]]:
    """Each token's piece of a line (-1: no box), numbered in reading order, and each piece's block: a line
    is cut where two of its words (one after the other) stand further apart than COLUMN_GAP times their height."""
    boxes = words.fractions()
    pieces = np.full(len(words), -1, np.int64)
    blocks: list[int] = []
    previous = -1  # the token before, on a line
    for index, line in enumerate(words.lines.tolist()):
        if line == NO_LINE:
            continue
        if previous < 0 or words.lines[previous] != line or _apart(boxes[previous], boxes[index]):
            blocks.append(int(words.blocks[line]) if line < len(words.blocks) else -1)
        pieces[index] = len(blocks) - 1
        previous = index
    return pieces, blocks


def _apart(before: np.ndarray, after: np.ndarray) -> bool:
    gap = max(after[0] - before[2], before[0] - after[2], after[1] - before[3], before[1] - after[3])
    height = max(min(b[2] - b[0], b[3] - b[1]) for b in (before, after))
    return bool(gap > COLUMN_GAP * height)


def _region(group: _Lines, tokens: list[str], words: PageWords, pieces: np.ndarray) -> Region:
    inside = np.isin(pieces, np.array(group.lines, dtype=pieces.dtype))
    boxes = words.fractions()[inside]
    bbox = (float(boxes[:, 0].min()), float(boxes[:, 1].min()), float(boxes[:, 2].max()), float(boxes[:, 3].max()))
    distinct, density = group.score
    return Region(bbox=bbox, source="text", score=round(distinct + density / (density + 1), 4), matched=tuple(group.terms),
                  text=" ".join(token for token, on in zip(tokens, inside.tolist()) if on))
