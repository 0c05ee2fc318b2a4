"""Which Snowball language a document is written in: py3langid's naive Bayes over byte n-grams, cheap.

One language a document, told by its first SAMPLE_CHARS characters of text (about 1 ms a document;
a page each would cost about as much as the rest of the text index's build). Only languages with a
Snowball stemmer are candidates (index/text/tokenize.py SNOWBALL), or those an index was told
(`languages`): fewer candidates, fewer mistakes on short pages. A document with too few letters to
tell gets None (its words are kept exact, unstemmed). The model (about 3 MB) loads once per process,
on the first document that needs it; an index told one language never loads it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from typing import Final

from .tokenize import SNOWBALL

SAMPLE_CHARS: Final = 1000  # the document's start: a language shows in its first paragraphs, and detection stays O(1) per document
MIN_LETTERS: Final = 20

_lock = threading.Lock()
_identifiers: dict[tuple[str, ...], object] = {}


def detect(texts: Iterable[str], languages: Collection[str] = ()) -> str | None:
    """The language of a document, by its pages' `texts`, among `languages` (all of SNOWBALL when empty): one, or None."""
    candidates = tuple(sorted(languages or SNOWBALL))
    if len(candidates) == 1:
        return candidates[0]
    sample = ""
    for text in texts:
        sample += text[:SAMPLE_CHARS - len(sample)] + "\n"
        if len(sample) >= SAMPLE_CHARS:
            break
    if sum(map(str.isalpha, sample)) < MIN_LETTERS:
        return None
    found, _ = _identifier(candidates).classify(sample)
    return str(found)


def _identifier(candidates: tuple[str, ...]):
    with _lock:
        if candidates not in _identifiers:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
            identifier.set_languages(list(candidates))
            _identifiers[candidates] = identifier
        return _identifiers[candidates]
