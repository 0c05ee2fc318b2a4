"""Which path answers a query: exact MaxSim over every page, or the binary first pass.

Exact MaxSim is the default; the first pass rescores its candidates exactly. `--first-pass N` asks for the first pass with N candidates;
`--first-pass auto` turns it on only where exact cannot serve: an index of AUTO_FROM_PAGES pages or
more, or whose vectors do not fit in this machine's memory (docs/performance.md, "The first pass")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# Measured by scripts/bench_first_pass.py (docs/performance.md): with the residual codes, 1,000 candidates
# keep recall@10 0.96 against exact on the tiny checkpoint's vectors of 3,000 rendered pages (300: 0.84).
DEFAULT_CANDIDATES = 1000
# Exact MaxSim reads every float16 vector: about 1.4 s a query at 10,000 pages on a 2-core CPU;
# from here the first pass is what keeps one query near a second.
AUTO_FROM_PAGES = 20_000
AUTO = "auto"


@dataclass(frozen=True)
class ScoringPath:
    """How a query is answered, as `query --json` reports it."""

    path: str  # "exact" | "first-pass" | "store" (a store that ranks by itself: Qdrant)
    candidates: int | None = None
    reason: str = ""
    hint: str | None = None
    exact_segments: int = 0  # segments without codes, scored exactly within a first pass

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "candidates": self.candidates, "reason": self.reason, "hint": self.hint,
                "exact_segments": self.exact_segments}


def parse_first_pass(value: int | str | None) -> int | str | None:
    """None, a number of candidates >= 1, or "auto"; ValueError otherwise."""
    if value is None or value == AUTO:
        return value
    number = int(value)
    if number < 1:
        raise ValueError(f"--first-pass takes a number of candidates >= 1 or 'auto', not {value!r}")
    return number


def choose(requested: int | str | None, pages: int, vector_bytes: int, segments: list[str], coded: set[str]) -> ScoringPath:
    """The path for a request. `coded`: the segments (of `segments`) whose codes this generation holds."""
    if requested is None:
        return ScoringPath("exact", reason="the default")
    if requested == AUTO:
        memory = physical_memory()
        if vector_bytes > memory:
            why = f"the vectors ({vector_bytes >> 20} MiB) do not fit in memory ({memory >> 20} MiB)"
        elif pages >= AUTO_FROM_PAGES:
            why = f"{pages} pages >= {AUTO_FROM_PAGES} (auto threshold)"
        else:
            return ScoringPath("exact", reason=f"auto: {pages} pages < {AUTO_FROM_PAGES}, exact serves")
        candidates = DEFAULT_CANDIDATES
    else:
        candidates, why = int(requested), "asked for"
    lacking = [sid for sid in segments if sid not in coded]
    if lacking and len(lacking) == len(segments):
        return ScoringPath("exact", reason=f"{why}, but this index has no binary codes (of the current version)", hint=UPGRADE_FOR_CODES)
    hint = UPGRADE_FOR_CODES if lacking else None
    return ScoringPath("first-pass", candidates, why, hint, exact_segments=len(lacking))


UPGRADE_FOR_CODES = ("pages written before binary codes (or before their current version) are scored exactly; "
                     "`lgpt-index upgrade` writes codes for every page")
THRESHOLD = f"auto: from {AUTO_FROM_PAGES:,} pages, or where the float16 vectors do not fit in memory"


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62
