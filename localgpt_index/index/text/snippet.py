"""A snippet: the part of a page's text where a query's terms are densest, matched words marked.

A word is matched as the text query matches pages: by its exact token, its stem in the document's language,
or a prefix (turb*), found in the page's lexicon (lexicon.py; a reader keeps the lexicons of the pages it met
last, and a hit's regions read the same matches). The snippet is the page's words, joined by single spaces,
from a little before the window of about WIDTH characters whose distinct query words weigh the most (a rare
word more than a common one: lexicon.py; a word longer than LONG cut); each compound that holds a matched
part between MARK (its punctuation outside; a code whole; a Chinese or Japanese character alone). A snippet's
own work is bounded: the first MAX_HITS matches are looked among, so a page that repeats a query word 25,000
times costs it about what any page costs (the page's lexicon, made once a reader, costs its words:
docs/hybrid.md has both measured)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from .lexicon import PageMatches, token_parts
from .tokenize import compound_spans, word_spans

WIDTH = 200
MAX_HITS = 256  # the matches a snippet is chosen among: the densest window of the page's first ones
MARK = ("**", "**")  # Markdown bold: what an answerer's prompt or a terminal renders as emphasis
LONG = WIDTH // 2  # a token is cut to this many characters (a URL, base64, a line of Chinese or Japanese)
NOTHING: frozenset[str] = frozenset()


def snippet(matches: PageMatches, width: int = WIDTH) -> str:
    """About `width` characters of a page's words around the window whose distinct query words weigh the most
    (the window: the snippet's last three quarters, so every hit that chose it is shown), each matched word between
    MARK; the page's first words if nothing matches; "" for no text."""
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
    before, (units, weights, _) = lexicon.before, matches.query.term_units([term for term, _ in terms])
    scale = [1] * (max(units) + 1)  # each unit's weight, in whole thousandths (a sliding sum of integers does not drift)
    for unit, weight in zip(units, weights):
        scale[unit] = max(1, round(weight * 1000))
    best, end = _densest([before[index] + index for index, _ in hits], [units[number] for _, number in hits], scale, width - width // 4)
    first = bisect_right(places, max(0, start(hits[best][0]) - width // 4), key=start) - 1  # start on a word
    last = min(len(tokens) - 1, max(first, bisect_left(places, start(first) + width, key=start) - 1))
    last = max(last, hits[end - 1][0])  # (every hit of the window shown, whatever long token came before it)
    marked = {index for index, _ in hits if first <= index <= last}
    shown = [_shown(token, matches.parts if index in marked else NOTHING) if index in marked or len(token) > LONG else token
             for index, token in enumerate(tokens[first: last + 1], first)]
    return ("… " if first else "") + " ".join(shown) + (" …" if last < len(tokens) - 1 else "")


def _shown(token: str, parts: frozenset[str]) -> str:
    """A token as a snippet shows it: each of its compounds that holds a matched part (`parts`; none for a token
    that matches nothing) between MARK; a token longer than LONG cut to LONG characters around its first mark, and marked word
    by word (a long compound's matched word is what is shown)."""
    marks: list[tuple[int, int]] = []
    for start, end in (word_spans(token) if len(token) > LONG else compound_spans(token)) if parts else ():
        if not parts.isdisjoint(token_parts(token[start:end])):
            if marks and marks[-1][1] == start:  # (touching: Chinese characters one after the other, one mark)
                start = marks.pop()[0]
            marks.append((start, end))
    lo, hi = 0, len(token)
    if hi > LONG:
        lo = max(0, min(marks[0][0] - LONG // 4 if marks else 0, hi - LONG))
        hi = lo + LONG
    pieces, at = ["…" if lo else ""], lo
    for start, end in marks:
        start, end = max(start, lo), min(end, hi)
        if start < end:
            pieces += [token[at:start], MARK[0], token[start:end], MARK[1]]
            at = end
    pieces += [token[at:hi], "…" if hi < len(token) else ""]
    return "".join(pieces)


def _densest(starts: list[int], units: list[int], weights: list[int], width: int) -> tuple[int, int]:
    """The hits first..end - 1 of the earliest window of `width` characters (from a hit's start) whose distinct units
    weigh the most (hits in order: each one's start and its unit, numbered below len(weights)): one pass with a
    sliding window (a page of one word repeated is linear, not quadratic)."""
    inside = [0] * len(weights)  # each unit's hits in starts[first:end], the hits starting within the window
    best, best_end, best_weight, weight, end = 0, 1, -1, 0, 0
    for first, start in enumerate(starts):
        while end < len(starts) and starts[end] < start + width:
            unit = units[end]
            if not inside[unit]:
                weight += weights[unit]
            inside[unit] += 1
            end += 1
        if weight > best_weight:
            best, best_end, best_weight = first, end, weight
        unit = units[first]
        inside[unit] -= 1
        if not inside[unit]:
            weight -= weights[unit]
    return best, best_end


def _words(tokens: list[str], first: int, last: int) -> str:
    last = max(first, min(last, len(tokens) - 1))
    return " ".join([_shown(token, NOTHING) if len(token) > LONG else token for token in tokens[first: last + 1]]) + \
        (" …" if last < len(tokens) - 1 else "")
