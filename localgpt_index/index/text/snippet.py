"""A snippet: the part of a page's text where a query's tokens are densest, matched words marked.

A word is matched by its exact token, or as another inflection of a query word: it begins with the
query word's stem in some Snowball language (the page's language is not looked up at query time), or
with a prefix (turb*). The work per page is bounded: the first MAX_HITS matches are looked among, so a
page that repeats a query word 25,000 times costs about what any page costs."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from .query import parse
from .tokenize import MIN_STEMMED, SNOWBALL, spans

WIDTH = 200
MAX_HITS = 256  # the matches a snippet is chosen among: the densest window of the page's first ones
MARK = ("**", "**")  # Markdown bold: what an answerer's prompt or a terminal renders as emphasis


def snippet(text: str, query: str, width: int = WIDTH) -> str:
    """About `width` characters of `text` around the window holding the most distinct query tokens,
    each matched word between MARK; the text's start if nothing matches; "" for no text."""
    exact, starts = _wanted(query)
    hits = spans(text, set(exact), starts, MAX_HITS)
    if not hits:
        return _clip(text, 0, width)
    best = _densest(hits, width)
    begin = max(0, hits[best][0] - width // 4)
    begin = text.rfind(" ", 0, begin) + 1 if begin else 0  # start on a word
    end = min(len(text), begin + width)
    marked, at = [], begin
    for start, stop in sorted({(start, stop) for start, stop, _ in hits if begin <= start and stop <= end}):
        if start < at:
            continue  # one compound's tokens share a span: marked once
        marked += [text[at:start], MARK[0], text[start:stop], MARK[1]]
        at = stop
    marked.append(text[at:end])
    body = " ".join("".join(marked).split())
    return ("… " if begin else "") + body + (" …" if end < len(text) else "")


@lru_cache(maxsize=256)
def _wanted(query: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A query's exact tokens, and the starts of the words that match it as another inflection or a
    prefix: its stems in every Snowball language, its words that are their own stem, its prefixes
    (parsed once for the snippets of all its hits)."""
    parsed = parse(query, SNOWBALL)
    words = [word for word in parsed.exact if word.isalpha() and len(word) > MIN_STEMMED]
    starts = tuple(dict.fromkeys(term for term in parsed.stemmed + words + parsed.prefixes if len(term) >= MIN_STEMMED))
    return tuple(parsed.exact), starts


def _densest(hits: list[tuple[int, int, str]], width: int) -> int:
    """The first hit of the earliest window of `width` characters (from a hit's start) holding the most
    distinct tokens: one pass with a sliding window (a page of one word repeated is linear, not quadratic)."""
    inside: Counter[str] = Counter()  # tokens of hits[first:end], the hits starting within the window
    best, best_count, end = 0, -1, 0
    for first, (start, _, _) in enumerate(hits):
        while end < len(hits) and hits[end][0] < start + width:
            inside[hits[end][2]] += 1
            end += 1
        if len(inside) > best_count:
            best, best_count = first, len(inside)
        inside[hits[first][2]] -= 1
        if not inside[hits[first][2]]:
            del inside[hits[first][2]]
    return best


def _clip(text: str, begin: int, width: int) -> str:
    body = " ".join(text[begin:begin + width].split())
    return body + (" …" if len(text) > begin + width else "")
