"""The one tokenizer of page text and queries (the local engine and the Qdrant sparse vectors use it).

Text is NFKC-normalised and case-folded (Unicode-aware: "Straße" and "STRASSE" meet), then split into
words: runs of letters, digits and combining marks in any script (so Devanagari or Arabic words keep
their vowel signs). Codes stay findable: a run of words joined by - _ . / : , with at least one digit
("INV-2024-0042", "v1.3", "A/B-12", "1,250.00") gives its parts and the parts glued ("inv20240042"), so the exact
code, the code typed without separators and each part all match. Han, kana and Hangul have no spaces:
each such character is its own token. No stemming and no stop words (BM25's idf weighs common words
down); no model and no download. TOKENIZER_VERSION changes whenever the tokens of some text change,
so an index built by another version is rebuilt rather than queried with different tokens.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

import regex

TOKENIZER_VERSION: Final = 1
MAX_TOKEN_CHARS: Final = 64  # longer runs (base64, hashes glued to text) are noise, and dropped

_CJK = r"\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}"
_WORD = rf"[[\p{{L}}\p{{N}}\p{{M}}]--[{_CJK}]]+"
# a word, optionally followed by more words each after one joiner: a compound (a code when it has a digit)
_COMPOUND = regex.compile(rf"{_WORD}(?:[-_./:,]{_WORD})*|[{_CJK}]", regex.V1)
_PARTS = regex.compile(_WORD, regex.V1)
# the same two for ASCII text (most pages), where a word is [a-z0-9]+ (after case folding; A-Z kept for
# spans, which match the text as it is): the standard library's re runs them about 3x faster than regex's set operations
_ASCII_COMPOUND = re.compile(r"[a-zA-Z0-9]+(?:[-_./:,][a-zA-Z0-9]+)*")
_ASCII_PARTS = re.compile(r"[a-zA-Z0-9]+")


def normalize(text: str) -> str:
    """The form tokens are cut from: NFKC (full-width forms, ligatures) and case folding."""
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str) -> list[str]:
    """The tokens of `text`, in order (a code's glued form follows its parts)."""
    tokens: list[str] = []
    text = normalize(text)
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


_JOINERS = str.maketrans("", "", "-_./:,")


def spans(text: str, wanted: set[str] | None = None) -> list[tuple[int, int, str]]:
    """(start, end, token) of each token of `text` in its own characters (for snippets): a compound's
    tokens all span the compound; a word whose normalised form changes length (ß, ligatures) is found.
    With `wanted`, only those tokens (a compound that holds none of them, even glued, is not tokenized)."""
    found = []
    for match in _COMPOUND.finditer(text):
        if wanted is not None:
            folded = normalize(match.group())
            if not any(token in folded or token in folded.translate(_JOINERS) for token in wanted):
                continue
        for token in tokenize(match.group()):
            if wanted is None or token in wanted:
                found.append((match.start(), match.end(), token))
    return found
