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
estimated from the list's deeper spacings (ranks m = 10 to N: their median over ln 2, which an outlier
does not move); then the lead s_1 - s_m that noise gives is about scale * H, H = 1 + 1/2 + ... +
1/(m-1). A page's standing is (s - s_b) / (scale * H), between 0 and EVIDENCE_CAP, s_b the list's
median (its last score when the list is short); a text list that holds every page that matched counts
the other pages as scores of 0. A list's evidence is its best page's lead over the m-th in those
units: about 1 when its top is only the tail of noise, well above when something stands out. A list's
weight grows with its evidence above noise and saturates: clip((e - 1) / (STRONG - 1), 0, 1), so two
lists that both found something weigh the same and neither silences the other; when no list is above
noise, each weighs its evidence relative to the strongest's (all 1 when none has any). A short list
whose scores still fall (a rare query term matched few pages) has no deep spacings to measure noise
with: it is strong evidence (EVIDENCE_CAP); a list whose scores are all
equal carries none.

What every query gets. A page can stand out whatever is asked: with a random-weight model one
picture (another size, another colour) is visual rank 1 for every query, and by the margin alone
it looks like evidence. A list whose top is the same page for every query carries none. So a
list can carry a `PagePrior`, learned from the lists of probe queries that ask nothing in
particular (query/hybrid.py asks them once per generation): each page's usual standing (its score,
the list's median subtracted and divided by its spread) and how much that varies. The list's scores
are then each page's standing above its own usual (a hubness correction, as CSLS does for
cross-lingual retrieval), and its evidence counts only above `null`, the most evidence a probe list
showed (each probe corrected by the prior of the others): what this model gives on this index when
nothing is asked. A list above its null weighs clip((e - null) / room, 0, 1); when no list stands above
its null, a list with a prior weighs 0 and each other its evidence relative to the strongest (the list
that found more leads), and all weigh 1 only when none has any.
"""

from __future__ import annotations

import math
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


def standing(scores: Sequence[float], lead_rank: int = LEAD_RANK, unranked: int = 0) -> Standing:
    """The list's evidence and each score's standing, in the list's order; `unranked`: candidates the list
    does not hold, each scoring 0 (a text list that holds every page that matched a word of the query)."""
    values = [float(score) for score in scores]
    ranked = sorted(values, reverse=True) + [0.0] * (unranked if values else 0)
    if not ranked:
        return Standing(0.0, [])
    if len(ranked) == 1:
        return Standing(EVIDENCE_CAP, [EVIDENCE_CAP])  # the one page that matched
    if ranked[0] == ranked[-1]:
        return Standing(0.0, [0.0] * len(values))
    m = min(lead_rank, max(2, len(ranked) // 2))
    deep = [i * (ranked[i - 1] - ranked[i]) for i in range(m, len(ranked))]
    scale = sorted(deep)[len(deep) // 2] / math.log(2) if deep else 0.0  # the median: an outlier moves no unit
    if scale <= 0.0 and deep:  # tied scores: the mean of the spacings
        scale = sum(deep) / len(deep)
    unit = scale * sum(1.0 / i for i in range(1, m))
    if unit <= 0.0:  # no fall past the top: all of the fall is the lead
        unit = (ranked[0] - ranked[-1]) / EVIDENCE_CAP
    evidence = min((ranked[0] - ranked[m - 1]) / unit, EVIDENCE_CAP)
    bulk = ranked[len(ranked) // 2] if len(ranked) > 2 * m else ranked[-1]  # a full list's bottom is no yardstick
    return Standing(evidence, [min(max(value - bulk, 0.0) / unit, EVIDENCE_CAP) for value in values])


def evidence(scores: Sequence[float], unranked: int = 0) -> float:
    """How far a list's best score stands from the rest, in noise units (about 1: noise)."""
    return standing(scores, unranked=unranked).evidence


def evidence_weights(lists: Mapping[str, Sequence[float]], priors: Mapping[str, PagePrior] | None = None,
                     unranked: Mapping[str, int] | None = None) -> dict[str, float]:
    """Each list's weight in [0, 1]: clip((e - null) / room, 0, 1), where e is its evidence, null 1 and
    room STRONG - 1; for a list with a prior (its scores corrected by it), null and room are the prior's.
    When none is above its null, a list with a prior weighs 0 (it showed no more than the probes did)
    and each other its e relative to the strongest; all 1 if none has any."""
    priors = priors or {}
    found = {name: evidence(scores, (unranked or {}).get(name, 0)) for name, scores in lists.items()}
    null = {name: priors[name].null if name in priors else 1.0 for name in lists}
    room = {name: priors[name].room if name in priors else STRONG - 1.0 for name in lists}
    weights = {name: min(max((found[name] - null[name]) / room[name], 0.0), 1.0) for name in lists}
    if any(weights.values()):
        return weights
    relative = {name: 0.0 if name in priors else found[name] for name in lists}  # under a measured null: noise
    strongest = max(relative.values(), default=0.0)
    if strongest <= 0.0:
        return {name: 1.0 for name in lists}
    return {name: value / strongest for name, value in relative.items()}


@dataclass(frozen=True)
class PagePrior(Generic[Key]):
    """What a list gives each page whatever the query (see the module's docstring), learned from probe lists."""

    usual: dict[Key, float]  # a page's mean standing over the probes
    spread: dict[Key, float]  # and its standard deviation (floored)
    unseen: float  # the usual standing of a page no probe list held
    null: float  # the most evidence a corrected probe list showed (its own page set aside)
    room: float  # how far above null a list weighs 1: the probes' max over their median, at least STRONG - 1

    @classmethod
    def learn(cls, probes: Sequence[tuple[Sequence[tuple[Key, float]], Key | None]]) -> PagePrior[Key] | None:
        """The prior of the probes' lists (each a ranking as fuse takes, and the page its question was
        drawn from, set aside: what the list rightly finds is no page's usual and no part of the null);
        None with fewer than 3."""
        if len(probes) < 3:
            return None
        lists = [(_normalised(ranking), source) for ranking, source in probes]
        found = cls._fit(lists)
        tops = []
        for left_out, (ranking, source) in enumerate(probes):
            others = cls._fit([item for i, item in enumerate(lists) if i != left_out])
            tops.append(evidence([score for key, score in others.correct(ranking) if key != source]))
        tops.sort()
        null = tops[-1]
        return cls(found.usual, found.spread, found.unseen, null, max(null - tops[len(tops) // 2], STRONG - 1.0))

    @classmethod
    def _fit(cls, lists: Sequence[tuple[dict[Key, float], Key | None]]) -> PagePrior[Key]:
        floors = [min(values.values(), default=0.0) for values, _ in lists]  # a page below a list's top stood at most there
        keys = {key for values, _ in lists for key in values}
        seen = {key: [values.get(key, floor) for (values, source), floor in zip(lists, floors) if key != source] for key in keys}
        seen = {key: values for key, values in seen.items() if values}
        usual = {key: sum(values) / len(values) for key, values in seen.items()}
        deviation = {key: (sum((v - usual[key]) ** 2 for v in values) / len(values)) ** 0.5 for key, values in seen.items()}
        typical = sorted(deviation.values())[len(deviation) // 2] if deviation else 1.0
        floor = max(typical, 1e-6)
        spread = {key: max(value, floor) for key, value in deviation.items()}
        return cls(usual, spread, sum(floors) / len(floors) if floors else 0.0, 0.0, 1.0)

    def correct(self, ranking: Sequence[tuple[Key, float]]) -> list[tuple[Key, float]]:
        """The ranking rescored: each page's standing above its usual, in its own spreads, best first."""
        typical = sorted(self.spread.values())[len(self.spread) // 2] if self.spread else 1.0
        rescored = [(key, (value - self.usual.get(key, self.unseen)) / self.spread.get(key, typical))
                    for key, value in _normalised(ranking).items()]
        return sorted(rescored, key=lambda item: -item[1])


def _normalised(ranking: Sequence[tuple[Key, float]]) -> dict[Key, float]:
    """A list's scores as standings: the median subtracted, divided by the standard deviation (which its
    own outliers widen, so that no page of a tight list stands a hundred spreads out)."""
    values = sorted(float(score) for _, score in ranking)
    if not values:
        return {}
    median = values[len(values) // 2]
    mean = sum(values) / len(values)
    spread = (sum((value - mean) ** 2 for value in values) / len(values)) ** 0.5 or 1.0
    found: dict[Key, float] = {}
    for key, score in ranking:
        found.setdefault(key, (float(score) - median) / spread)
    return found


def fuse(lists: Mapping[str, Sequence[tuple[Key, float]]], method: Fusion = "weighted", k: int = RRF_K,
         priors: Mapping[str, PagePrior[Key]] | None = None, unranked: Mapping[str, int] | None = None) -> list[Fused[Key]]:
    """All keys of all lists, best first. Ties: the better best rank in any list, then first seen.
    `priors` (weighted): a list's PagePrior, by which its scores are corrected and its evidence judged;
    `unranked` (weighted): a list's candidates that it does not hold, each scoring 0 (see standing)."""
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion {method!r}: one of {', '.join(FUSIONS)}")
    if k < 0:
        raise ValueError(f"the RRF k must be >= 0, not {k}")
    priors = priors or {}
    scored = {name: priors[name].correct(ranking) if name in priors and method == "weighted" else ranking
              for name, ranking in lists.items()}
    contributions: dict[str, dict[Key, float]] = {}
    weights = evidence_weights({name: [score for _, score in ranking] for name, ranking in scored.items()},
                               {name: prior for name, prior in priors.items() if method == "weighted"}, unranked)
    for name, ranking in scored.items():
        if method == "rrf":
            values = [1.0 / (k + rank) for rank in range(1, len(ranking) + 1)]
        else:
            found = standing([score for _, score in ranking], unranked=(unranked or {}).get(name, 0))
            values = [weights[name] * value for value in found.standings[: len(ranking)]]
        contributions[name] = {}
        for (key, _), value in zip(ranking, values):
            contributions[name].setdefault(key, value)
    scores: dict[Key, float] = {}
    ranks: dict[Key, dict[str, int | None]] = {}
    first_seen: dict[Key, int] = {}
    for name, ranking in lists.items():
        for rank, (key, _) in enumerate(ranking, 1):
            if key in ranks and ranks[key].get(name) is not None:
                continue  # a key twice in one list: its best rank counts
            scores[key] = scores.get(key, 0.0) + contributions[name][key]
            ranks.setdefault(key, {other: None for other in lists})[name] = rank
            first_seen.setdefault(key, len(first_seen))

    def order(key: Key) -> tuple[float, int, int]:
        best = min(rank for rank in ranks[key].values() if rank is not None)
        return (-scores[key], best, first_seen[key])

    return [Fused(key, scores[key], ranks[key]) for key in sorted(scores, key=order)]
