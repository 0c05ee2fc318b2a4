"""Which Snowball language a page is written in: py3langid's naive Bayes over byte n-grams, cheap.

Only languages with a Snowball stemmer are candidates (index/text/tokenize.py SNOWBALL), or those an
index was told (`languages`): fewer candidates, fewer mistakes on short pages. A page with too few
letters to tell gets None (its words are kept exact, unstemmed). The model (about 3 MB) loads once
per process, on the first page that needs it; an index told one language never loads it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Final

from .tokenize import SNOWBALL

SAMPLE_CHARS: Final = 2000  # the page's start: a language shows in its first paragraphs, and detection stays O(1) per page
MIN_LETTERS: Final = 20

_lock = threading.Lock()
_identifiers: dict[tuple[str, ...], object] = {}


def detect(text: str, languages: Collection[str] = ()) -> str | None:
    """The language of `text` among `languages` (all of SNOWBALL when empty): one, or None."""
    candidates = tuple(sorted(languages or SNOWBALL))
    if len(candidates) == 1:
        return candidates[0]
    sample = text[:SAMPLE_CHARS]
    if sum(char.isalpha() for char in sample) < MIN_LETTERS:
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
