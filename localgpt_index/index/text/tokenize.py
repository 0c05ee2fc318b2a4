"""The one analysis of page text and queries (the local engine and the Qdrant sparse vectors use it).

Text is case-folded and accent-folded (Unicode NFKD with the combining diacritics dropped, then NFC;
ß→ss, æ→ae, ø→o, œ→oe, ł→l, ligatures and full-width forms by NFKD): "Müller", "MULLER" and
"Muller" are one token, as FTS5's `remove_diacritics` or Lucene's ASCII folding make them. It is
then split into words: runs of letters, digits and combining marks in any script (so Devanagari or
Arabic words keep their vowel signs). Codes stay findable: a run of words joined by - _ . / : , with
at least one digit ("INV-2024-0042", "v1.3", "A/B-12", "1,250.00") gives its parts and the parts
glued ("inv20240042"), so the exact code, the code typed without separators and each part all
match. Han, kana and Hangul have no spaces: each such character is its own token.

These are the exact tokens. Beside them, each word of letters only gets its Snowball stem in the
page's language (Lucene's keyword-repeat: "engineers" gives "engineers" and "engin"; a word that is
its own stem gives one token), so another inflection matches through the stem, and the exact form
adds its own weight: exact words and codes (never stemmed) rank above stem matches. A query is
stemmed in every language of the index. No stop words (BM25's idf weighs common words down); no
model and no download. TOKENIZER_VERSION changes whenever the tokens of some text change, so an
index built by another version has its text index rebuilt (from the stored page text) rather than
queried with different tokens.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Final

import regex
import Stemmer

TOKENIZER_VERSION: Final = 2
MAX_TOKEN_CHARS: Final = 64  # longer runs (base64, hashes glued to text) are noise, and dropped
MIN_STEMMED: Final = 3  # shorter words are their own stem

_CJK = r"\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}"
_WORD = rf"[[\p{{L}}\p{{N}}\p{{M}}]--[{_CJK}]]+"
# a word, optionally followed by more words each after one joiner: a compound (a code when it has a digit)
_COMPOUND = regex.compile(rf"{_WORD}(?:[-_./:,]{_WORD})*|[{_CJK}]", regex.V1)
_PARTS = regex.compile(_WORD, regex.V1)
# the same two for ASCII text (most pages), where a word is [a-z0-9]+ (after case folding; A-Z kept for
# compounds, which snippets find in the text as written): the standard library's re runs them about 3x faster than
# regex's set operations
_ASCII_COMPOUND = re.compile(r"[a-zA-Z0-9]+(?:[-_./:,][a-zA-Z0-9]+)*")
_ASCII_PARTS = re.compile(r"[a-zA-Z0-9]+")
# letters NFKD does not decompose into a base and a mark (after case folding)
_LETTERS = {"æ": "ae", "ø": "o", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i", "ŧ": "t", "ħ": "h"}
_LETTER = re.compile("|".join(_LETTERS))  # a regex finds them faster than str.translate maps every character
_DIACRITICS = regex.compile(r"[\u0300-\u036f]+")  # the Latin, Greek and Cyrillic accents; other scripts' marks are letters' parts

# ISO 639-1 code (what the detector answers) -> Snowball algorithm (PyStemmer's name)
SNOWBALL: Final = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german", "el": "greek", "en": "english",
    "eo": "esperanto", "es": "spanish", "et": "estonian", "eu": "basque", "fa": "persian", "fi": "finnish",
    "fr": "french", "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian",
    "it": "italian", "lt": "lithuanian", "ne": "nepali", "nl": "dutch", "no": "norwegian", "pl": "polish",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil",
    "tr": "turkish",
}


def fold(text: str) -> str:
    """Case and accent folding: the form tokens are cut from."""
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKD", _LETTER.sub(lambda found: _LETTERS[found.group()], text.casefold()))
    return unicodedata.normalize("NFC", _DIACRITICS.sub("", folded))


@cache
def _stemmer(language: str) -> Stemmer.Stemmer:
    stemmer = Stemmer.Stemmer(SNOWBALL[language])
    stemmer.maxCacheSize = 20_000
    return stemmer


def exact_tokens(text: str) -> list[str]:
    """The exact (folded, unstemmed) tokens of `text`, in order (a code's glued form follows its parts)."""
    tokens: list[str] = []
    text = fold(text)
    compounds, words = (_ASCII_COMPOUND, _ASCII_PARTS) if text.isascii() else (_COMPOUND, _PARTS)
    for compound in compounds.findall(text):
        if compound.isalnum():  # no joiner: one word (or one Han, kana or Hangul character), most tokens; its own token
            if len(compound) <= MAX_TOKEN_CHARS:
                tokens.append(compound)
            continue
        parts = words.findall(compound) or [compound]
        tokens.extend(part for part in parts if len(part) <= MAX_TOKEN_CHARS)
        if len(parts) > 1 and any(char.isdigit() for char in compound):
            glued = "".join(parts)
            if len(glued) <= MAX_TOKEN_CHARS:
                tokens.append(glued)
    return tokens


def compound_spans(text: str) -> list[tuple[int, int]]:
    """Where each compound of `text` as written (not folded) starts and ends: what a snippet marks."""
    return [found.span() for found in (_ASCII_COMPOUND if text.isascii() else _COMPOUND).finditer(text)]


def word_spans(text: str) -> list[tuple[int, int]]:
    """Where each word of `text` as written starts and ends (a compound's words apart)."""
    return [found.span() for found in (_ASCII_PARTS if text.isascii() else _PARTS).finditer(text)]


def stems(tokens: Iterable[str], language: str | None) -> list[str]:
    """The stems of `tokens` in `language` that differ from their word (words of letters only)."""
    if language not in SNOWBALL:
        return []
    tokens = list(tokens)
    distinct = [word for word in dict.fromkeys(tokens) if len(word) >= MIN_STEMMED and word.isalpha()]  # each stemmed once
    stemmed = {word: stem for word, stem in zip(distinct, _stemmer(language).stemWords(distinct)) if stem != word}
    return [stem for stem in map(stemmed.get, tokens) if stem]


@dataclass(frozen=True)
class Analysed:
    """A page's tokens: the exact ones in order (phrases match them), then the stems."""

    exact: list[str]
    stemmed: list[str]

    @property
    def tokens(self) -> list[str]:
        return self.exact + self.stemmed


def analyse(text: str, language: str | None) -> Analysed:
    exact = exact_tokens(text)
    return Analysed(exact, stems(exact, language))


def tokenize(text: str, language: str | None = None) -> list[str]:
    """Every token of `text` (exact, then stems in `language`): what BM25 counts."""
    return analyse(text, language).tokens
