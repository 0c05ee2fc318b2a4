"""Which Snowball language a document is written in: py3langid's naive Bayes over byte n-grams, cheap.

One language a document, told by its first SAMPLE_CHARS characters of text (about 1 ms a document;
a page each would cost about as much as the rest of the text index's build). Only languages with a
Snowball stemmer are candidates (index/text/tokenize.py SNOWBALL), or those an index was told
(`languages`): fewer candidates, fewer mistakes on short pages. A document with too few letters to
tell gets None (its words are kept exact, unstemmed). The model (about 3 MB) loads once per process,
on the first document that needs it; an index told one language never loads it.

What an index is told is its `language` setting (build --language, recorded in the manifest: `told`),
"auto" (None recorded) leaving each document to the detector; a build given --ocr-lang and no --language
takes the Snowball languages of Tesseract's (`from_ocr_lang`: deu+eng -> de+en).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Collection, Iterable
from typing import Any, Final

from .tokenize import SNOWBALL

AUTO: Final = "auto"
# Tesseract's language names (ISO 639-2 and a few of its own) -> ISO 639-1, for those with a Snowball stemmer
TESSERACT: Final = {
    "ara": "ar", "cat": "ca", "ces": "cs", "dan": "da", "deu": "de", "frk": "de", "deu_latf": "de", "ell": "el", "eng": "en",
    "epo": "eo", "spa": "es", "spa_old": "es", "est": "et", "eus": "eu", "fas": "fa", "fin": "fi", "fra": "fr", "frm": "fr",
    "gle": "ga", "hin": "hi", "hun": "hu", "hye": "hy", "ind": "id", "ita": "it", "ita_old": "it", "lit": "lt", "nep": "ne",
    "nld": "nl", "nor": "no", "pol": "pl", "por": "pt", "ron": "ro", "rus": "ru", "srp": "sr", "srp_latn": "sr", "swe": "sv",
    "tam": "ta", "tur": "tr",
}
SAMPLE_CHARS: Final = 1000  # the document's start: a language shows in its first paragraphs, and detection stays O(1) per document
MIN_LETTERS: Final = 20

_lock = threading.Lock()
_model: Any = None  # py3langid's, every language: read once a process
_identifiers: dict[tuple[str, ...], Any] = {}  # each set of candidates': a copy of it


def language_setting(value: str) -> str:
    """A --language value as an index records it: "auto", or ISO 639-1 codes joined by "+" (sorted, each
    with a Snowball stemmer; a Snowball name such as "german" is taken for its code); ValueError otherwise."""
    names = {name: code for code, name in SNOWBALL.items()}
    parts = [part.strip().lower() for part in value.replace(",", "+").split("+") if part.strip()]
    if parts == [AUTO]:
        return AUTO
    unknown = [part for part in parts if part not in SNOWBALL and part not in names]
    if not parts or unknown:
        raise ValueError(f"{', '.join(unknown) or repr(value)}: not a language with a stemmer; "
                         f"give auto, or ISO 639-1 codes joined by + ({', '.join(sorted(SNOWBALL))})")
    return "+".join(sorted({names.get(part, part) for part in parts}))


def from_ocr_lang(ocr_lang: str) -> str:
    """The language setting Tesseract's languages (eng+deu) stand for: their codes with a stemmer, else auto."""
    codes = sorted({TESSERACT[part] for part in ocr_lang.split("+") if part in TESSERACT})
    return "+".join(codes) or AUTO


def told(language: str | None) -> tuple[str, ...]:
    """The languages an index's `language` setting tells its documents' detection (none: auto, all of SNOWBALL)."""
    if language is None or language == AUTO:
        return ()
    return tuple(sorted(language.split("+")))


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
    """The detector among `candidates`: the model read once a process (about a second of CPU), each set of
    candidates a shallow copy of it (set_languages replaces the copy's class columns; the n-gram tables are shared)."""
    global _model
    with _lock:
        if candidates not in _identifiers:
            if _model is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _model = LanguageIdentifier.from_model_file(MODEL_FILE)
            identifier = copy.copy(_model)
            identifier.set_languages(list(candidates))
            _identifiers[candidates] = identifier
        return _identifiers[candidates]
