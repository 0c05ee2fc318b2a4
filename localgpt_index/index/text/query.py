"""A text query, parsed: its words, quoted phrases ("late payment") and prefixes (turb*).

Every word counts once in BM25's sum, by its exact token and, where another inflection may match,
its stem in each of the index's languages. A phrase requires its words in that order (on the exact
tokens); a prefix stands for the indexed words that start with it (the most frequent ones, a bounded
number). Anything else in the query is plain words: an unmatched quote is a word's edge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .tokenize import exact_tokens, stems

_PHRASE = re.compile(r'"([^"]*)"')
_PREFIX = re.compile(r"(?<![\w*])(\w[\w-]*)\*", re.UNICODE)


@dataclass(frozen=True)
class TextQuery:
    exact: list[str]  # the distinct exact tokens (phrase words among them)
    stemmed: list[str]  # the distinct stems, in any of the index's languages, that are no exact token
    phrases: list[list[str]] = field(default_factory=list)  # each phrase's exact tokens, in order
    prefixes: list[str] = field(default_factory=list)  # folded prefixes (the text before a *)

    @property
    def terms(self) -> list[str]:
        """Exact tokens and stems: what the index is asked for."""
        return self.exact + self.stemmed

    @property
    def plain(self) -> bool:
        """Whether the query is words only (no phrase, no prefix): what a sparse vector can answer."""
        return not self.phrases and not self.prefixes


def parse(text: str, languages: Iterable[str] = ()) -> TextQuery:
    phrases = [tokens for tokens in (exact_tokens(quoted) for quoted in _PHRASE.findall(text)) if tokens]
    rest = _PHRASE.sub(" ", text)
    prefixes = [token for found in _PREFIX.findall(rest) for token in exact_tokens(found)[-1:]]
    rest = _PREFIX.sub(" ", rest)
    exact = list(dict.fromkeys(exact_tokens(rest) + [token for phrase in phrases for token in phrase]))
    known = set(exact)
    stemmed = list(dict.fromkeys(stem for language in languages for stem in stems(exact, language) if stem not in known))
    return TextQuery(exact, stemmed, phrases, list(dict.fromkeys(prefixes)))
