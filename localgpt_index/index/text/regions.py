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

import re
from dataclasses import dataclass, field

import numpy as np

from ...core.types import Region
from ...core.words import NO_LINE, WORD_SCALE, PageWords, neighbour_gaps
from .query import TextQuery
from .tokenize import exact_tokens, fold, stems

MAX_TEXT_REGIONS = 3  # a hit's text regions at most (query/regions.py keeps room for visual ones)
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


class QueryTerms:
    """A query's terms under one language's analysis, and what each token seen so far matches: made once for a
    query and shared by its hits (a word met on one page is not analysed again on the next)."""

    def __init__(self, query: TextQuery, language: str | None) -> None:
        self.query, self.language = query, language
        self.exact, self.stemmed = set(query.exact), set(query.stemmed) | set(query.exact)
        starts = {term[:-1] if len(term) > 3 else term for term in self.stemmed} | set(query.prefixes)
        # a stem keeps its word's start but for its last letter
        self.pattern = re.compile("|".join(re.escape(start) for start in sorted(starts, key=len, reverse=True))) if starts else None
        self.known: dict[str, list[str]] = {}

    def matched(self, tokens: list[str]) -> dict[int, list[str]]:
        """The tokens that match the query, by index, with their query terms (the query word, stem or prefix* each
        matches). Only the tokens whose folded text holds a term's start are analysed (one regular expression
        over the page)."""
        if self.pattern is None:
            return {}
        joined = "\n".join(tokens)
        folded = tokens
        if joined.isascii():  # ASCII: lower() folds
            joined = joined.lower()
        else:
            folded = [fold(token) for token in tokens]
            joined = "\n".join(folded)
        ends = np.cumsum(np.fromiter(map(len, folded), np.int64, len(folded)) + 1)  # each token's end, its newline included
        starts_at = np.fromiter((match.start() for match in self.pattern.finditer(joined)), np.int64)
        found: dict[int, list[str]] = {}
        for index in np.unique(np.searchsorted(ends, starts_at, side="right")).tolist():
            token = tokens[index]
            terms = self.known.get(token)
            if terms is None:
                terms = self.known[token] = self._terms(token)
            if terms:
                found[index] = terms
        return found

    def _terms(self, token: str) -> list[str]:
        parts = exact_tokens(token)
        terms = [part for part in parts if part in self.exact]
        terms += [stem for stem in stems([p for p in parts if p not in self.exact], self.language) if stem in self.stemmed]
        terms += [f"{prefix}*" for prefix in self.query.prefixes if any(part.startswith(prefix) for part in parts)]
        return list(dict.fromkeys(terms))


def page_text_regions(text: str, words: PageWords, query: QueryTerms, limit: int = MAX_TEXT_REGIONS) -> list[Region]:
    """The regions of `query` on a page whose text is `text` and word positions `words`, best first."""
    tokens = text.split()
    if len(tokens) != len(words) or not tokens:
        return []  # positions of another text (not expected): no regions rather than wrong ones
    terms = query.matched(tokens)
    if not terms:
        return []
    pieces = line_pieces(words)
    by_line: dict[int, dict[str, int]] = {}
    for index, found in terms.items():
        line = int(pieces.of_token[index])
        if line >= 0:
            for term in found:
                by_line.setdefault(line, {}).setdefault(term, 0)
                by_line[line][term] += 1
    groups: list[_Lines] = []
    for line in sorted(by_line):
        block = int(pieces.blocks[line])
        last = groups[-1] if groups else None
        if last is not None and last.block == block and last.lines[-1] == line - 1:
            last.lines.append(line)
        else:
            groups.append(last := _Lines([line], block))
        for term, count in by_line[line].items():
            last.terms[term] = last.terms.get(term, 0) + count
    groups.sort(key=lambda group: group.score, reverse=True)
    return [_region(group, tokens, words.boxes, pieces) for group in groups[:limit]]


@dataclass(frozen=True)
class LinePieces:
    """A page's lines cut into pieces: each token's piece (`of_token`, -1: no box), numbered in reading order,
    each piece's block, and the tokens with a box (`placed`) with their pieces (`placed_pieces`, ascending)."""

    of_token: np.ndarray
    blocks: np.ndarray
    placed: np.ndarray
    placed_pieces: np.ndarray

    def tokens(self, first: int, last: int) -> np.ndarray:
        """The tokens (with a box) of pieces `first` to `last`, in order."""
        low, high = np.searchsorted(self.placed_pieces, [first, last + 1])
        return self.placed[low:high]


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
        return LinePieces(pieces, np.zeros(0, np.int64), known, np.zeros(0, np.int64))
    lines = words.lines[known].astype(np.int64)
    gap, height = neighbour_gaps(words.boxes[known].astype(np.int32))
    starts = np.concatenate([[True], (lines[1:] != lines[:-1]) | (gap > COLUMN_GAP * height)])
    pieces[known] = np.cumsum(starts) - 1
    block_of = words.blocks.astype(np.int64)
    first_lines = lines[starts]
    blocks = np.where(first_lines < len(block_of), block_of[np.minimum(first_lines, max(len(block_of) - 1, 0))], -1) \
        if len(block_of) else np.full(len(first_lines), -1)
    return LinePieces(pieces, blocks, known, pieces[known])


def _region(group: _Lines, tokens: list[str], boxes: np.ndarray, pieces: LinePieces) -> Region:
    inside = pieces.tokens(group.lines[0], group.lines[-1])  # a group's lines follow each other
    held = boxes[inside]
    low, high = held[:, :2].min(axis=0).tolist(), held[:, 2:].max(axis=0).tolist()
    bbox = (low[0] / WORD_SCALE, low[1] / WORD_SCALE, high[0] / WORD_SCALE, high[1] / WORD_SCALE)
    distinct, density = group.score
    return Region(bbox=bbox, source="text", score=round(distinct + density / (density + 1), 4), matched=tuple(group.terms),
                  text=" ".join([tokens[index] for index in inside.tolist()]))
