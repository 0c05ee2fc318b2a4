"""A page's lexicon and a query's matches in it: what snippets and text regions both read.

A page's tokens are its text split on whitespace (the words' order; core/words.py places each on the
page). Its lexicon lists the exact (folded) parts of those tokens, sorted, each with the tokens holding
it; a reader keeps the lexicons of the pages it met last (LexicalIndex.page_lexicon), so a page met again
is not read nor analysed again. A token matches a query as the text query matches pages (query.py,
tokenize.py): one of its exact tokens is a query word, or its stem in the document's language is one of
the query's stems, or it starts with a query prefix. Phrase words match as words, and where a phrase's
words follow each other the phrase is a term of its own. A query's matches on a page are worked out once
for its snippet and its regions (QueryAnalysis).

Each term stands for one of the query's words (its exact token or a stem of it), prefixes or phrases: its
unit. A snippet's window and a region are chosen by the units they hold, each weighted by its rarity in the
index (the BM25 idf of the rarest of its forms the index holds; a phrase, its words' sum): a line holding
"revenue" beats one holding "the", "in" and "was" for "What was the revenue in the third quarter?", and
"revenue" and "revenues" on one line are one word of the query, not two.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, compress
from typing import Protocol

from .query import TextQuery
from .tokenize import MAX_TOKEN_CHARS, exact_tokens, stems


@dataclass(frozen=True)
class PageLexicon:
    """A page's text, its tokens (`text.split()`), and each of their exact (folded) parts, sorted (a prefix's parts
    are a range), with the distinct tokens holding it; where those tokens are on the page is found when a query
    first matches the part (holders), so the work of making a lexicon is its distinct tokens', not its words'."""

    text: str
    tokens: list[str]
    keys: list[str]  # each token as its parts are found in it (ASCII: lowered)
    parts: list[str]
    holding: list[tuple[str, ...]]  # each part's distinct keys
    before: list[int]  # the characters of the tokens before each one (one more: all of them)
    _holders: dict[int, list[int]] = field(default_factory=dict, compare=False, repr=False)

    def start(self, token: int) -> int:
        """Where token number `token` starts in the tokens joined by single spaces (len(tokens): past the last)."""
        return self.before[token] + token

    def holders(self, parts: list[int]) -> list[list[int]]:
        """The tokens holding each of `parts` (numbers), each in order: found the first time a query matches a part,
        for all the parts asked at once (one pass over the page in C, then a step a token that holds one)."""
        missing = [part for part in dict.fromkeys(parts) if part not in self._holders]
        if len(missing) == 1:  # (most: a query's word)
            held = self.holding[missing[0]]
            wanted = held[0].__eq__ if len(held) == 1 else set(held).__contains__
            self._holders[missing[0]] = list(compress(range(len(self.keys)), map(wanted, self.keys)))
        elif missing:
            of_key: dict[str, list[int]] = {}  # each key's parts among the missing
            for part in missing:
                for key in self.holding[part]:
                    of_key.setdefault(key, []).append(part)
            found: dict[int, list[int]] = {part: [] for part in missing}
            for index in compress(range(len(self.keys)), map(of_key.__contains__, self.keys)):
                for part in of_key[self.keys[index]]:
                    found[part].append(index)
            self._holders.update(found)
        return [self._holders[part] for part in parts]


def page_lexicon(text: str) -> PageLexicon:
    """`text`'s lexicon: each distinct token analysed once (a page of ASCII words: its lowered words are its parts)."""
    tokens = text.split()
    lowered = text.lower().split() if text.isascii() else None  # (ASCII: lower() folds, a word of letters and digits is its part)
    keys = lowered or tokens
    holding: dict[str, list[str]] = {}  # each part's distinct keys
    for key in dict.fromkeys(keys):
        for part in (key,) if lowered is not None and key.isalnum() and len(key) <= MAX_TOKEN_CHARS else token_parts(key):
            if part in holding:
                holding[part].append(key)
            else:
                holding[part] = [key]
    parts = sorted(holding)
    return PageLexicon(text, tokens, keys, parts, [tuple(holding[part]) for part in parts], list(accumulate(map(len, tokens), initial=0)))


@lru_cache(maxsize=1 << 16)  # (queries meet the same words again)
def part_stems(part: str, language: str | None) -> tuple[str, ...]:
    """The stem of one exact token in `language`, where it differs from the token."""
    return tuple(stems([part], language))


@lru_cache(maxsize=1 << 16)  # (pages share most of their words: a page's lexicon is mostly lookups)
def token_parts(token: str) -> tuple[str, ...]:
    """The exact tokens of one whitespace-separated token of page text (tokenize.exact_tokens)."""
    return tuple(exact_tokens(token))


class QueryTerms:
    """A query's terms under one language's analysis, and what each part of a page's tokens seen so far matches:
    made once for a query and shared by its hits (a word met on one page is not analysed again on the next)."""

    def __init__(self, query: TextQuery, language: str | None, rarity: Mapping[str, float] | None = None) -> None:
        """`rarity`: the idf in the index of each of the query's exact tokens and stems (QueryAnalysis asks it; None:
        every unit weighs 1)."""
        self.query, self.language = query, language
        self.exact, self.stemmed = set(query.exact), set(query.stemmed) | set(query.exact)
        # where a matching part begins: a stem keeps its word's start but for its last letter; a glued code's is
        # its own (exact) form; a prefix
        self.starts = sorted({term[:-1] if len(term) > 3 else term for term in self.stemmed} | set(query.prefixes))
        self.phrases = {quoted(phrase): phrase for phrase in query.phrases if len(phrase) > 1}
        terms = [*self.phrases, *query.exact, *query.stemmed, *(f"{prefix}*" for prefix in query.prefixes)]
        self.order = {term: rank for rank, term in enumerate(dict.fromkeys(terms))}  # a region's terms in the query's order
        self.known: dict[str, tuple[str, ...]] = {}
        self.rarity = rarity
        self.unit_of, self.weights = self._unit_weights()
        self._term_units: dict[tuple[str, ...], tuple[list[int], list[float], float]] = {}

    def _unit_weights(self) -> tuple[dict[str, int], list[float]]:
        """Each term's unit (a query word, with its stems in this language that are no query word; a prefix; a
        phrase) and each unit's weight (a word's: the idf of the rarest of its forms the index holds)."""
        query, rarity = self.query, self.rarity
        unit_of = {word: number for number, word in enumerate(query.exact)}
        weights: list[float] = []
        for number, word in enumerate(query.exact):
            forms = [word, *(stem for stem in stems([word], self.language) if stem in self.stemmed and stem not in self.exact)]
            for form in forms:
                unit_of.setdefault(form, number)
            weights.append(max(rarity.get(form, 0.0) for form in forms) if rarity is not None else 1.0)
        words = weights[:]
        for name, phrase in self.phrases.items():
            unit_of[name] = len(weights)
            weights.append(sum(words[query.exact.index(word)] for word in phrase))
        for prefix in query.prefixes:  # (its words' rarity unknown: as the rarest word's, or 1)
            unit_of[f"{prefix}*"] = len(weights)
            weights.append(max(words, default=0.0) or 1.0)
        return unit_of, weights

    def term_units(self, terms: list[str]) -> tuple[list[int], list[float], float]:
        """Each of `terms`' unit and that unit's weight (a stem in another of the index's languages: a unit of its
        own, weighed by its own idf), and the weight of all the query's units and these: worked out once for a set of
        terms (a query's pages mostly match the same ones)."""
        key = tuple(terms)
        found = self._term_units.get(key)
        if found is None:
            count = len(self.weights)
            units = [self.unit_of.get(term, count + at) for at, term in enumerate(terms)]
            weights = [self.weights[unit] if unit < count else self._foreign_weight(term) for unit, term in zip(units, terms)]
            total = sum(self.weights) + sum(weight for unit, weight in zip(units, weights) if unit >= count)
            found = self._term_units[key] = units, weights, total
        return found

    def _foreign_weight(self, term: str) -> float:
        if self.rarity is None:
            return 1.0
        return self.rarity.get(term) or 1.0  # (not asked, or held by no page: as a unit without an index)

    def matches(self, lexicon: PageLexicon) -> PageMatches:
        """The query's matches on the page: each query term the page holds (the query word, stem or prefix* a token
        matches, or a phrase) with the tokens that match it, and the parts that matched. Only the parts that begin
        with a term's start are analysed (a range each of the page's sorted parts)."""
        matched: list[tuple[int, tuple[str, ...]]] = []  # each matching part's number and its terms
        parts = lexicon.parts
        for start in self.starts:
            at = bisect_left(parts, start)
            while at < len(parts) and parts[at].startswith(start):
                terms = self.known.get(parts[at])
                if terms is None:
                    terms = self.known[parts[at]] = self._terms(parts[at])
                if terms:
                    matched.append((at, terms))
                at += 1
        found: dict[str, set[int]] = {}
        for (_, terms), holding in zip(matched, lexicon.holders([at for at, _ in matched])):
            for term in terms:
                found.setdefault(term, set()).update(holding)
        for name, phrase in self.phrases.items():  # a phrase's words in order (a hyphenated pair: one token)
            held = _phrase_tokens(phrase, found)
            if held:
                found[name] = held
        return PageMatches(lexicon, found, frozenset(parts[at] for at, _ in matched), self)

    def _terms(self, part: str) -> tuple[str, ...]:
        terms = [part] if part in self.exact else [stem for stem in part_stems(part, self.language) if stem in self.stemmed]
        return (*terms, *(f"{prefix}*" for prefix in self.query.prefixes if part.startswith(prefix)))


def quoted(phrase: list[str]) -> str:
    """A phrase's name as a term: its words, quoted."""
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


@dataclass(frozen=True)
class PageMatches:
    """A query's matches on one page: the page's lexicon, each matched term's tokens, the parts that matched
    (QueryTerms.matches)."""

    lexicon: PageLexicon
    found: dict[str, set[int]]
    parts: frozenset[str]  # the page's parts that match (a snippet marks the compounds holding one)
    query: QueryTerms  # the terms matched: their units and weights, their order


class TextSource(Protocol):
    """What a query's analysis reads (the generation's LexicalIndex)."""

    def language(self, path: str) -> str | None: ...

    def parse(self, query: str) -> TextQuery: ...

    def page_lexicon(self, path: str, page: int) -> PageLexicon | None: ...

    def idf(self, tokens: list[str]) -> dict[str, float]: ...


class QueryAnalysis:
    """One query's terms under each language its pages' documents were stemmed in (made as they are met), and its
    matches on each page asked for (worked out once: a hit's snippet and its regions share them)."""

    def __init__(self, source: TextSource, query: str) -> None:
        self.source, self.query = source, query
        self._parsed: TextQuery | None = None
        self._terms: dict[str | None, QueryTerms] = {}
        self._languages: dict[str, str | None] = {}  # a document's, asked of the text index once
        self._pages: dict[tuple[str, int], PageMatches | None] = {}

    def of(self, path: str) -> QueryTerms:
        """The query's terms under the language of the document at `path`."""
        if path not in self._languages:
            self._languages[path] = self.source.language(path)
        language = self._languages[path]
        if language not in self._terms:
            parsed = self._parsed = self._parsed or self.source.parse(self.query)
            rarity = self.source.idf([*parsed.exact, *parsed.stemmed])  # (its stems in every language: a search read them)
            self._terms[language] = QueryTerms(parsed, language, rarity)
        return self._terms[language]

    def page(self, path: str, page: int) -> PageMatches | None:
        """The query's matches on a page (1-based) of the document at `path`; None where the page is not in the text index."""
        key = (path, page)
        if key not in self._pages:
            lexicon = self.source.page_lexicon(path, page)
            self._pages[key] = self.of(path).matches(lexicon) if lexicon is not None else None
        return self._pages[key]
