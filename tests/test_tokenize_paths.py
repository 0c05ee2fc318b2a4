"""The tokenizer's fast paths (a joiner-free word is its own token; ASCII text through the standard
library's re) give exactly the tokens of the one general path: the text index's tokens, and so
TOKENIZER_VERSION, are unchanged. The reference below is the general path as it was written before."""

from __future__ import annotations

import random

from localgpt_index.index.text import tokenize as T


def _reference(text: str) -> list[str]:
    tokens: list[str] = []
    for match in T._COMPOUND.finditer(T.fold(text)):
        compound = match.group()
        parts = T._PARTS.findall(compound) or [compound]
        tokens.extend(part for part in parts if len(part) <= T.MAX_TOKEN_CHARS)
        if len(parts) > 1 and any(char.isdigit() for char in compound):
            glued = "".join(parts)
            if len(glued) <= T.MAX_TOKEN_CHARS:
                tokens.append(glued)
    return tokens


PIECES = [*"abcXYZ019 -_./:,;'\"()\t\n!?", "ß", "ﬁ", "한", "國", "か", "カ", "\u0915\u093f", "\u0301", "é", "É", "²", "½", "٣",
          "Straße", "INV-2024-0042", "v1.3", "x" * 70, "A/B-12", "1,250.00", "e.g.", "--", "a_b", "\x0c"]


def test_the_fast_paths_give_the_tokens_of_the_general_path():
    rng = random.Random(27)
    ascii_pieces = [p for p in PIECES if p.isascii()]
    for n in range(6000):
        pieces = ascii_pieces if n % 2 else PIECES  # half the texts all ASCII: the re path
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        assert T.tokenize(text) == _reference(text), text


def test_known_texts():
    assert T.tokenize("Invoice INV-2024-0042, v1.3 Straße") == ["invoice", "inv", "2024", "0042", "inv20240042",
                                                                "v1", "3", "v13", "strasse"]
    assert T.tokenize("see e.g. A/B") == ["see", "e", "g", "a", "b"]
    assert T.tokenize("x" * 65 + " ok") == ["ok"]
