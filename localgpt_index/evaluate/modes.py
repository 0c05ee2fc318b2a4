"""The ways of answering `eval` compares, and how each is asked of the query layer.

A variant is a mode, a first pass, a fusion.

Modes and fusions are the query layer's (a QueryRequest's, with `Index.mode(request)` refusing a mode
the index cannot answer); `eval` passes them on and lets the query layer judge them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..core.errors import UsageError
from ..core.types import MODES, SearchHit
from ..query.request import QueryRequest, QuerySettings, validated


@dataclass(frozen=True)
class Variant:
    mode: str
    first_pass: int | None = None  # pages a first pass keeps for exact scoring; None: exact
    fusion: str | None = None  # hybrid: how the two lists are fused; None: the query layer's default

    @property
    def label(self) -> str:
        return (self.mode + (f" {self.fusion}" if self.fusion else "")
                + (f", first pass {self.first_pass}" if self.first_pass else ""))


def parse_list(text: str, option: str, allowed: Sequence[str] | None = None) -> list[str]:
    """`a,b,c` -> the names in the order given, each once; an empty list or a name not `allowed` is a UsageError."""
    names = list(dict.fromkeys(m.strip().lower() for m in text.split(",") if m.strip()))
    unknown = [m for m in names if allowed is not None and m not in allowed]
    if unknown or not names:
        choose = f"; choose from {', '.join(allowed)} (comma-separated)" if allowed else ""
        raise UsageError(f"{option} {text!r}: {'unknown name ' + repr(unknown[0]) if unknown else 'no name'}{choose}.")
    return names


def parse_modes(text: str) -> list[str]:
    return parse_list(text, "--modes", MODES)


def variants(modes: Sequence[str], first_passes: Sequence[int] = (), fusions: Sequence[str] = ()) -> list[Variant]:
    """Each mode (hybrid: with each fusion) exact, then with each first pass; text mode has no first
    pass (it reads no vectors), and only hybrid fuses."""
    if fusions and "hybrid" not in modes:
        raise UsageError("--fusions chooses how hybrid mode fuses its lists: add hybrid to --modes.")
    found = []
    for mode in modes:
        fused: Sequence[str | None] = (fusions or [None]) if mode == "hybrid" else [None]
        for fusion in fused:
            found.append(Variant(mode, None, fusion))
            found += [Variant(mode, n, fusion) for n in dict.fromkeys(first_passes) if mode != "text"]
    if first_passes and all(v.first_pass is None for v in found):
        raise UsageError("--first-pass narrows the visual list: it applies to the visual and hybrid modes, not text.")
    return found


def _settings(variant: Variant, depth: int = 5) -> QuerySettings:
    fields = {"mode": variant.mode, "first_pass": variant.first_pass, "k": depth} | ({"fusion": variant.fusion} if variant.fusion else {})
    return validated(QuerySettings, f"eval's variant {variant.label}", **fields)


def default_modes(index: Any) -> list[str]:
    """What `query` answers in by default: hybrid where the index has page text, visual otherwise."""
    return [index.mode()]


def check_modes(index: Any, chosen: Sequence[Variant]) -> None:
    """Refuse, before any query is asked, a variant the index cannot answer (the query layer's own
    message: an index without page text cannot answer text or hybrid; an unknown fusion)."""
    for variant in dict.fromkeys(Variant(v.mode, None, v.fusion) for v in chosen):
        index.mode(_settings(variant))


def request(texts: Sequence[str], variant: Variant, depth: int) -> QueryRequest:
    """The query request of `texts` answered as `variant` says, the top `depth` pages each."""
    return _settings(variant, depth).asking(*texts)


def search(index: Any, texts: Sequence[str], variant: Variant, depth: int) -> list[list[SearchHit]]:
    """The query layer's top `depth` pages for each of `texts`, answered as `variant` says."""
    return index.search(request(texts, variant, depth))
