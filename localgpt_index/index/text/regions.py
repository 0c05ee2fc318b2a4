"""Text regions: the lines of a page holding a query's matched terms, from the page's word positions.

A page's words are the tokens of its stored text (core/words.py). A token matches the query as the text
query matches pages (index/text/query.py, tokenize.py): one of its exact (folded) tokens is a query word,
or its stem in the document's language is one of the query's stems, or it starts with a query prefix.
Phrase words match as words, and where a phrase's words follow each other the phrase is a term of its
own (so the line holding it ranks first). The lines holding matches become regions: a line's box is the
union of its words' boxes (a line is cut where a gap between two words is wider than COLUMN_GAP times
their height: OCR may read two columns' lines as one), adjacent lines of one block that both match are
merged, and regions are ranked by the distinct query terms they hold, then by their matches a line. The
words in a region are its text.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Union

import numpy as np

from ...core.types import Region
from ...core.words import NO_LINE, WORD_SCALE, PageWords, neighbour_gaps
from .query import TextQuery
from .tokenize import MAX_TOKEN_CHARS, exact_tokens, stems

PageTextSource = Union[str, Callable[[], Optional[str]]]  # a page's text, or how to read it where it is needed
MAX_TEXT_REGIONS = 3  # a hit's text regions at most (query/regions.py keeps room for visual ones)
COLUMN_GAP = 1.5  # a gap between two words of a line wider than this many times their height parts two columns


class QueryTerms:
    """A query's terms under one language's analysis, and what each part of a page's tokens seen so far matches:
    made once for a query and shared by its hits (a word met on one page is not analysed again on the next)."""

    def __init__(self, query: TextQuery, language: str | None) -> None:
        self.query, self.language = query, language
        self.exact, self.stemmed = set(query.exact), set(query.stemmed) | set(query.exact)
        # where a matching part begins: a stem keeps its word's start but for its last letter; a glued code's is
        # its own (exact) form; a prefix
        self.starts = sorted({term[:-1] if len(term) > 3 else term for term in self.stemmed} | set(query.prefixes))
        self.phrases = {_quoted(phrase): phrase for phrase in query.phrases if len(phrase) > 1}
        terms = [*self.phrases, *query.exact, *query.stemmed, *(f"{prefix}*" for prefix in query.prefixes)]
        self.order = {term: rank for rank, term in enumerate(dict.fromkeys(terms))}  # a region's terms in the query's order
        self.known: dict[str, tuple[str, ...]] = {}

    def matching(self, lexicon: PageLexicon) -> dict[str, set[int]]:
        """Each query term the page holds (the query word, stem or prefix* a token matches), with the tokens that
        match it. Only the parts that begin with a term's start are analysed (a range each of the page's sorted parts)."""
        found: dict[str, set[int]] = {}
        parts, holders = lexicon.parts, lexicon.holders
        for start in self.starts:
            at = bisect_left(parts, start)
            while at < len(parts) and parts[at].startswith(start):
                terms = self.known.get(parts[at])
                if terms is None:
                    terms = self.known[parts[at]] = self._terms(parts[at])
                for term in terms:
                    found.setdefault(term, set()).update(holders[at])
                at += 1
        for name, phrase in self.phrases.items():  # a phrase's words in order (a hyphenated pair: one token)
            held = _phrase_tokens(phrase, found)
            if held:
                found[name] = held
        return found

    def _terms(self, part: str) -> tuple[str, ...]:
        terms = [part] if part in self.exact else [stem for stem in part_stems(part, self.language) if stem in self.stemmed]
        return (*terms, *(f"{prefix}*" for prefix in self.query.prefixes if part.startswith(prefix)))


def _quoted(phrase: list[str]) -> str:
    return '"' + " ".join(phrase) + '"'


def _phrase_tokens(phrase: list[str], found: dict[str, set[int]]) -> set[int]:
    """The tokens of each place the phrase's words (exact) follow each other: each word in the token after the
    previous word's, or in the same one (late-payment)."""
    chains = {token: token for token in found.get(phrase[0], ())}  # each start -> the token its last word is in
    for word in phrase[1:]:
        holding = found.get(word, set())
        chains = {start: last + 1 if last + 1 in holding else last for start, last in chains.items()
                  if last + 1 in holding or last in holding}
    return {token for start, last in chains.items() for token in range(start, last + 1)}


@lru_cache(maxsize=1 << 16)  # (queries meet the same words again)
def part_stems(part: str, language: str | None) -> tuple[str, ...]:
    """The stem of one exact token in `language`, where it differs from the token."""
    return tuple(stems([part], language))


@lru_cache(maxsize=1 << 16)  # (pages share most of their words: a page's lexicon is mostly lookups)
def token_parts(token: str) -> tuple[str, ...]:
    """The exact tokens of one whitespace-separated token of page text (tokenize.exact_tokens)."""
    return tuple(exact_tokens(token))


@dataclass(frozen=True)
class PageLexicon:
    """A page's text as its text regions read it: its tokens (`text.split()`: the words' order) and each of their
    exact (folded) parts, sorted, with the tokens holding it (a prefix's parts are a range). Made once for a
    page's text (kept in its `words.derived`, for the text it was made of)."""

    of: tuple[int, int]  # the text's length and hash
    tokens: list[str]
    parts: list[str]
    holders: list[list[int]]
    piece_texts: dict[int, str] = field(default_factory=dict, compare=False)  # a line piece's words, joined (as met)

    def piece_text(self, piece: int, pieces: LinePieces) -> str:
        """The words of a line piece of this page, in reading order. `pieces`: line_pieces() of the words this
        lexicon is kept with (the texts are kept by piece number)."""
        found = self.piece_texts.get(piece)
        if found is None:
            placed = pieces.placed[pieces.starts[piece]: pieces.starts[piece + 1]]
            found = self.piece_texts[piece] = " ".join([self.tokens[index] for index in placed])
        return found


def page_lexicon(text: PageTextSource, words: PageWords) -> PageLexicon | None:
    """`text`'s lexicon, kept with the page's words (made again if they were another text's). `text`: the page's text,
    or how to read it, called only where no lexicon is kept with the words (None where the page has no text)."""
    found = words.derived.get("lexicon")
    if callable(text):
        if isinstance(found, PageLexicon):
            return found
        read = text()
        if not read:
            return None
        text = read
    key = (len(text), hash(text))
    if not isinstance(found, PageLexicon) or found.of != key:
        tokens = text.split()
        lowered = text.lower().split() if text.isascii() else None  # (ASCII: lower() folds, a word of letters and digits is its part)
        by_token: dict[str, list[int]] = {}  # each distinct token's places: a page's tokens are analysed once each
        for index, token in enumerate(lowered or tokens):
            held = by_token.get(token)
            if held is None:
                by_token[token] = [index]
            else:
                held.append(index)
        holding: dict[str, list[int]] = {}  # each part's tokens (in no order: matching makes them sets)
        for token, held in by_token.items():
            for part in (token,) if lowered is not None and token.isalnum() and len(token) <= MAX_TOKEN_CHARS else token_parts(token):
                if part in holding:
                    holding[part] = holding[part] + held
                else:
                    holding[part] = held
        parts = sorted(holding)
        found = words.derived["lexicon"] = PageLexicon(key, tokens, parts, [holding[part] for part in parts])
    return found


def page_text_regions(text: PageTextSource, words: PageWords, query: QueryTerms, limit: int = MAX_TEXT_REGIONS) -> list[Region]:
    """The regions of `query` on a page whose text is `text` (or is read by it: page_lexicon) and word positions
    `words`, best first."""
    lexicon = page_lexicon(text, words)
    if lexicon is None or len(lexicon.tokens) != len(words) or not lexicon.tokens:
        return []  # positions of another text (not expected): no regions rather than wrong ones
    found = query.matching(lexicon)
    if not found:
        return []
    pieces = line_pieces(words)
    terms = list(found)
    ranked = sorted(_groups(found, terms, pieces), key=_score, reverse=True)  # (stable: equal ones in reading order)
    return [_region(group, terms, lexicon, pieces, query.order) for group in ranked[:limit]]


# matching lines first..last of one block, merged: (first, last, distinct terms, matches a line, each term's matches);
# a plain tuple (one is made for every group of matching lines of every hit)
_Group = tuple[int, int, int, float, list[int]]


def _groups(found: dict[str, set[int]], terms: list[str], pieces: LinePieces) -> list[_Group]:
    """The lines holding matched tokens (`terms`: `found`'s, in an order), consecutive ones of one block merged, each
    scored: distinct terms, then matches a line (a long merged block does not win by its length)."""
    of_token, blocks = pieces.of_token, pieces.blocks
    width = len(terms)
    held = sorted([line * width + term for term, name in enumerate(terms) for index in found[name] if (line := of_token[index]) >= 0])
    groups: list[_Group] = []
    first = last = -2
    counts: list[int] = []
    for code in held:
        line, term = divmod(code, width)
        if line != last:
            if line != last + 1 or blocks[line] != blocks[last]:
                if counts:
                    groups.append((first, last, width - counts.count(0), sum(counts) / (last - first + 1), counts))
                first, counts = line, [0] * width
            last = line
        counts[term] += 1
    if counts:
        groups.append((first, last, width - counts.count(0), sum(counts) / (last - first + 1), counts))
    return groups


def _score(group: _Group) -> tuple[int, float]:
    """A group's rank: its distinct terms, then its matches a line."""
    return group[2], group[3]


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


def _region(group: _Group, terms: list[str], lexicon: PageLexicon, pieces: LinePieces, order: dict[str, int]) -> Region:
    """A group's box (its lines' union), score, terms (in the query's order) and words."""
    first, last, distinct, density, counts = group
    if first == last:
        x0, y0, x1, y1 = pieces.boxes[first]
        text = lexicon.piece_text(first, pieces)
    else:
        left, top, right, bottom = zip(*pieces.boxes[first: last + 1])
        x0, y0, x1, y1 = min(left), min(top), max(right), max(bottom)
        text = " ".join([lexicon.piece_text(piece, pieces) for piece in range(first, last + 1)])
    matched = [term for term, count in zip(terms, counts) if count]
    if len(matched) > 1:
        matched.sort(key=order.__getitem__)
    return Region((x0 / WORD_SCALE, y0 / WORD_SCALE, x1 / WORD_SCALE, y1 / WORD_SCALE), "text",
                  round(distinct + density / (density + 1), 4), tuple(matched), text)
