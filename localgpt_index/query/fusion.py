"""Fusing independent candidate lists (the lexical top N and the visual top N) into one ranking.

Each list ranks keys (a page: path and page number) with the scores its engine gave, best first.
Two methods:

- `rrf`: reciprocal-rank fusion, score(d) = sum over lists of 1 / (k + rank_l(d)) (Cormack et al.
  2009; k = 60 by default). It ignores scores, so every list weighs the same whatever it found.
- `weighted` (the default): each page's score in each list, in units of what noise would give
  (`standing`), weighed by the evidence the list carries, summed. With a random-weight model the
  visual list is noise: equal-weight RRF lets its top ranks, and pages that sit in the middle of
  both lists, push the lexical list's right page out of the top 5; here it weighs nothing.

Noise units. The top order statistics of a sample from a distribution with an exponential-like tail
(normal, Gumbel, exponential: what MaxSim and BM25 scores look like away from a match) have
spacings with i * (s_i - s_{i+1}) ~ Exp(scale), independent (Rényi's representation). The scale is
estimated from the list's deeper spacings (ranks m = 10 to N); then the lead s_1 - s_m that noise
gives is about scale * H, H = 1 + 1/2 + ... + 1/(m-1). A page's standing is (s - s_N) / (scale * H),
at most EVIDENCE_CAP; a list's evidence is its best page's lead over the m-th in those units: about 1
when its top is only the tail of noise, well above when something stands out. A list's weight grows
with its evidence above noise and saturates: clip((e - 1) / (STRONG - 1), 0, 1), so two lists that
both found something weigh the same and neither silences the other; when no list has any evidence
all weigh 1. A short list whose scores still fall (a rare query term matched few pages) has no deep
spacings to measure noise with: it is strong evidence (EVIDENCE_CAP); a list whose scores are all
equal carries none.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from ..core.types import FUSIONS, Fusion

RRF_K: Final = 60
LEAD_RANK: Final = 10
EVIDENCE_CAP: Final = 10.0
STRONG: Final = 3.0  # evidence from which a list has its full weight

Key = TypeVar("Key", bound=Hashable)  # what the lists rank (hybrid: a (path, page) pair)


@dataclass(frozen=True)
class Fused(Generic[Key]):
    """One fused result: its key, fused score, and its rank in each list (None: not in it)."""

    key: Key
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Standing:
    """A list's scores in noise units (see the module's docstring)."""

    evidence: float
    standings: list[float]


def standing(scores: Sequence[float], lead_rank: int = LEAD_RANK) -> Standing:
    """The list's evidence and each score's standing, in the list's order."""
    values = [float(score) for score in scores]
    ranked = sorted(values, reverse=True)
    if not ranked:
        return Standing(0.0, [])
    if len(ranked) == 1:
        return Standing(EVIDENCE_CAP, [EVIDENCE_CAP])  # the one page that matched
    if ranked[0] == ranked[-1]:
        return Standing(0.0, [0.0] * len(values))
    m = min(lead_rank, max(2, len(ranked) // 2))
    deep = [i * (ranked[i - 1] - ranked[i]) for i in range(m, len(ranked))]
    scale = sum(deep) / len(deep) if deep else 0.0
    unit = scale * sum(1.0 / i for i in range(1, m))
    if unit <= 0.0:  # no fall past the top: all of the fall is the lead
        unit = (ranked[0] - ranked[-1]) / EVIDENCE_CAP
    evidence = min((ranked[0] - ranked[m - 1]) / unit, EVIDENCE_CAP)
    return Standing(evidence, [min((value - ranked[-1]) / unit, EVIDENCE_CAP) for value in values])


def evidence(scores: Sequence[float]) -> float:
    """How far a list's best score stands from the rest, in noise units (about 1: noise)."""
    return standing(scores).evidence


def evidence_weights(lists: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each list's weight in [0, 1]: clip((e - 1) / (STRONG - 1), 0, 1); all 1 if none has any."""
    weights = {name: min(max((evidence(scores) - 1.0) / (STRONG - 1.0), 0.0), 1.0) for name, scores in lists.items()}
    if not any(weights.values()):
        return {name: 1.0 for name in lists}
    return weights


def fuse(lists: Mapping[str, Sequence[tuple[Key, float]]], method: Fusion = "weighted", k: int = RRF_K) -> list[Fused[Key]]:
    """All keys of all lists, best first. Ties: the better best rank in any list, then first seen."""
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion {method!r}: one of {', '.join(FUSIONS)}")
    if k < 0:
        raise ValueError(f"the RRF k must be >= 0, not {k}")
    contributions: dict[str, list[float]] = {}
    weights = evidence_weights({name: [score for _, score in ranking] for name, ranking in lists.items()})
    for name, ranking in lists.items():
        if method == "rrf":
            contributions[name] = [1.0 / (k + rank) for rank in range(1, len(ranking) + 1)]
        else:
            contributions[name] = [weights[name] * value for value in standing([score for _, score in ranking]).standings]
    scores: dict[Key, float] = {}
    ranks: dict[Key, dict[str, int | None]] = {}
    first_seen: dict[Key, int] = {}
    for name, ranking in lists.items():
        for rank, ((key, _), value) in enumerate(zip(ranking, contributions[name]), 1):
            if key in ranks and ranks[key].get(name) is not None:
                continue  # a key twice in one list: its best rank counts
            scores[key] = scores.get(key, 0.0) + value
            ranks.setdefault(key, {other: None for other in lists})[name] = rank
            first_seen.setdefault(key, len(first_seen))

    def order(key: Key) -> tuple[float, int, int]:
        best = min(rank for rank in ranks[key].values() if rank is not None)
        return (-scores[key], best, first_seen[key])

    return [Fused(key, scores[key], ranks[key]) for key in sorted(scores, key=order)]
