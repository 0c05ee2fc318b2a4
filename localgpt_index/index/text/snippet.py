"""A snippet: the part of a page's text where a query's terms are densest, matched words marked.

A word is matched as the text query matches pages: by its exact token, its stem in the document's language,
or a prefix (turb*), found in the page's lexicon (lexicon.py; a reader keeps the lexicons of the pages it met
last, and a hit's regions read the same matches). The snippet is the page's whole words, joined by single
spaces, from a little before the window of about WIDTH characters that holds the most distinct query terms;
each matched word between MARK, its punctuation outside. The work per page is bounded: the first MAX_HITS
matches are looked among, so a page that repeats a query word 25,000 times costs about what any page costs."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

from .lexicon import PageMatches

WIDTH = 200
MAX_HITS = 256  # the matches a snippet is chosen among: the densest window of the page's first ones
MARK = ("**", "**")  # Markdown bold: what an answerer's prompt or a terminal renders as emphasis
_MARKED = re.compile(r"\w(?:.*\w)?", re.DOTALL)  # a matched word's part between marks: its first to its last letter or digit


def snippet(matches: PageMatches, width: int = WIDTH) -> str:
    """About `width` characters of a page's words around the window holding the most distinct query terms,
    each matched word between MARK; the page's first words if nothing matches; "" for no text."""
    lexicon, found = matches.lexicon, matches.found
    tokens, start = lexicon.tokens, lexicon.start
    if not tokens:
        return ""
    places = range(len(tokens) + 1)  # (searched by where each token starts: lexicon.start)
    terms = [(term, held) for term, held in found.items() if not term.startswith('"')]  # (a phrase's words are terms of their own)
    # each term's first MAX_HITS tokens (a set of small ints iterates nearly in order: sorting it is quick), merged
    hits = sorted((index, number) for number, (_, held) in enumerate(terms) for index in sorted(held)[:MAX_HITS])[:MAX_HITS]
    if not hits:
        return _words(tokens, 0, bisect_left(places, width, key=start) - 1)
    best = _densest([start(index) for index, _ in hits], [number for _, number in hits], len(terms), width)
    first = bisect_right(places, max(0, start(hits[best][0]) - width // 4), key=start) - 1  # start on a word
    last = min(len(tokens) - 1, max(first, bisect_left(places, start(first) + width, key=start) - 1))
    marked = {index for index, _ in hits if first <= index <= last}
    shown = [_marked(tokens[index]) if index in marked else tokens[index] for index in range(first, last + 1)]
    return ("… " if first else "") + " ".join(shown) + (" …" if last < len(tokens) - 1 else "")


def _marked(token: str) -> str:
    found = _MARKED.search(token)
    if found is None:
        return token
    return f"{token[:found.start()]}{MARK[0]}{found.group()}{MARK[1]}{token[found.end():]}"


def _densest(starts: list[int], terms: list[int], kinds: int, width: int) -> int:
    """The first hit of the earliest window of `width` characters (from a hit's start) holding the most distinct
    terms (hits in order: each one's start and its term, numbered below `kinds`): one pass with a sliding window
    (a page of one word repeated is linear, not quadratic)."""
    inside = [0] * kinds  # each term's hits in starts[first:end], the hits starting within the window
    best, best_count, distinct, end = 0, -1, 0, 0
    for first, start in enumerate(starts):
        while end < len(starts) and starts[end] < start + width:
            distinct += not inside[terms[end]]
            inside[terms[end]] += 1
            end += 1
        if distinct > best_count:
            best, best_count = first, distinct
        inside[terms[first]] -= 1
        distinct -= not inside[terms[first]]
    return best


def _words(tokens: list[str], first: int, last: int) -> str:
    last = max(first, min(last, len(tokens) - 1))
    return " ".join(tokens[first: last + 1]) + (" …" if last < len(tokens) - 1 else "")
