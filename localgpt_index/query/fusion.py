"""Fusing independent candidate lists (the lexical top N and the visual top N) into one ranking.

Two methods, one shape: each list is a ranking of keys (a page: path and page number) with the
scores its engine gave, best first.

- `rrf`: reciprocal-rank fusion, score(d) = sum over lists of w_l / (k + rank_l(d)) with equal
  weights (Cormack et al. 2009; k = 60 by default).
- `weighted` (the default): the same sum, each list weighed by the evidence it carries. A list
  whose best scores stand far above the rest found something; a list whose top is only the
  upper tail of noise did not. With a random-weight model the visual list is such noise, and
  equal-weight RRF lets it push the lexical list's right page out of the top 5.

Evidence of a list (`evidence`): the lead of its best score over its m-th (m = 10), divided by the
lead that noise would give. The top order statistics of a sample from a distribution with an
exponential-like tail (normal, Gumbel, exponential: what MaxSim and BM25 scores look like away from
their match) have spacings with i * (s_i - s_{i+1}) ~ Exp(scale), independent (Rényi); so the lead
s_1 - s_m expected from noise is scale * (1 + 1/2 + ... + 1/(m-1)), and the scale is estimated
from the list's deeper spacings (ranks m to N). Evidence about 1: the top is what noise gives;
well above 1: it stands out. A list's weight is its evidence above that noise level, max(e - 1, 0);
when no list has any, all weigh the same (plain RRF). A short list whose scores still fall
(a rare query term matched few pages) has no deep spacings to measure noise with: it counts as
strong evidence (EVIDENCE_CAP). A list whose scores are all equal carries none.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

Method = Literal["weighted", "rrf"]
METHODS: Final = ("weighted", "rrf")
RRF_K: Final = 60
LEAD_RANK: Final = 10
EVIDENCE_CAP: Final = 10.0


@dataclass(frozen=True)
class Fused:
    """One fused result: its key, fused score, and its rank in each list (None: not in it)."""

    key: Hashable
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)


def evidence(scores: Sequence[float], lead_rank: int = LEAD_RANK) -> float:
    """How far a list's best score stands from the rest, in units of what noise gives (see above)."""
    ranked = sorted((float(score) for score in scores), reverse=True)
    if len(ranked) < 2 or ranked[0] == ranked[-1]:
        return 0.0
    m = min(lead_rank, max(2, len(ranked) // 2))
    deep = [i * (ranked[i - 1] - ranked[i]) for i in range(m, len(ranked))]
    scale = sum(deep) / len(deep) if deep else 0.0
    lead = ranked[0] - ranked[m - 1]
    if scale <= 0.0:
        return EVIDENCE_CAP if lead > 0 else 0.0
    expected = scale * sum(1.0 / i for i in range(1, m))
    return min(lead / expected, EVIDENCE_CAP)


def evidence_weights(lists: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each list's weight: its evidence above the noise level, max(e - 1, 0); all equal if none has any."""
    above = {name: max(evidence(scores) - 1.0, 0.0) for name, scores in lists.items()}
    total = sum(above.values())
    if total <= 0.0:
        return {name: 1.0 for name in lists}
    return {name: value / total for name, value in above.items()}


def fuse(lists: Mapping[str, Sequence[tuple[Hashable, float]]], method: Method = "weighted", k: int = RRF_K) -> list[Fused]:
    """All keys of all lists, best first. Ties: the better best rank in any list, then list order."""
    if method not in METHODS:
        raise ValueError(f"unknown fusion {method!r}: one of {', '.join(METHODS)}")
    if k < 0:
        raise ValueError(f"the RRF k must be >= 0, not {k}")
    if method == "rrf":
        weights = {name: 1.0 for name in lists}
    else:
        weights = evidence_weights({name: [score for _, score in ranking] for name, ranking in lists.items()})
    scores: dict[Hashable, float] = {}
    ranks: dict[Hashable, dict[str, int | None]] = {}
    first_seen: dict[Hashable, int] = {}
    for name, ranking in lists.items():
        for rank, (key, _) in enumerate(ranking, 1):
            if key in ranks and ranks[key].get(name) is not None:
                continue  # a key twice in one list: its best rank counts
            scores[key] = scores.get(key, 0.0) + weights[name] / (k + rank)
            ranks.setdefault(key, {other: None for other in lists})[name] = rank
            first_seen.setdefault(key, len(first_seen))

    def order(key: Hashable) -> tuple[float, int, int]:
        best = min(rank for rank in ranks[key].values() if rank is not None)
        return (-scores[key], best, first_seen[key])

    return [Fused(key, scores[key], ranks[key]) for key in sorted(scores, key=order)]
