"""Queries that join an exact scoring pass while it runs (continuous batching).

An exact pass goes through a generation's vectors part by part (LocalView.exact_units). A sweep goes
round those parts for as long as any query needs them: a query that arrives while a pass runs joins
it at the next part, is scored with every query already there on each part they both still need, and
is done once it has been round every part (the ones it missed come first on the next round). Each
part is read once for all the queries on it, no query waits for a pass to end before it starts, and
a lone query starts at once: no window, no clock. The view scores each part (the CPU scorer, or a
device scorer set on the view): nothing here depends on where the scoring runs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.errors import LgptError
from ..core.failpoints import failpoint


@dataclass(eq=False)
class Member:
    """One request's queries on a sweep: what it still needs and what it has got."""

    request: Any  # a SearchRequest
    vectors: list[np.ndarray]
    index: Any  # the generation (query.search.Index) it was encoded for
    deliver: Callable[[Any], None]  # its answer, or the exception that failed it
    cancelled: Callable[[], bool]
    batch_queries: int = 1  # queries encoded with it in one forward pass
    stacked: int = 0  # the most queries scored together on one part with it
    remaining: set[int] = field(default_factory=set)
    scores: dict[int, np.ndarray] = field(default_factory=dict)


class Sweep:
    """The exact pass of one generation, gone round while members need it."""

    def __init__(self, index: Any, device: str, answer: Callable[..., Any]) -> None:
        self.index, self.device = index, device
        self.make_answer = answer  # (index, results, batch_queries, scored_with) -> a SearchAnswer
        index.prepare_scoring(device)  # a device scorer, when the service scores on one: a segment a part
        self.units = index.view.exact_units()
        self.cursor = 0
        self.members: list[Member] = []
        self.steps = 0  # parts scored
        self.shared = 0  # parts scored for queries of more than one request

    def join(self, member: Member) -> None:
        member.remaining = set(range(len(self.units)))
        self.members.append(member)

    def step(self) -> list[Member]:
        """Score the next part for every member that still needs it; the members done, answered."""
        self.members = [m for m in self.members if not m.cancelled()]
        if not self.units:  # an index without pages
            done, self.members = self.members, []
            return [m for m in done if self._answer(m)]
        unit = self.cursor
        self.cursor = (self.cursor + 1) % len(self.units)
        on = [m for m in self.members if unit in m.remaining]
        if not on:
            return []
        vectors = [v for m in on for v in m.vectors]
        failpoint("serve.sweep")
        try:
            scores = self.index.view.score_unit(vectors, self.units[unit], self.device)
        except Exception as exc:  # noqa: BLE001 - a damaged block: every query reading it fails with it
            self.members = [m for m in self.members if m not in on]
            for member in on:
                member.deliver(exc)
            return []
        self.steps += 1
        self.shared += len(on) > 1
        at = 0
        for member in on:
            member.scores[unit] = scores[at : at + len(member.vectors)]
            at += len(member.vectors)
            member.remaining.discard(unit)
            member.stacked = max(member.stacked, len(vectors))
        done = [m for m in on if not m.remaining]
        self.members = [m for m in self.members if m.remaining]
        return [m for m in done if self._answer(m)]

    def _answer(self, member: Member) -> bool:
        """The member's answer delivered (or what failed it); True when it was an answer."""
        request, index = member.request, self.index
        try:
            view = index.view
            hits: list = [[] for _ in member.vectors]
            if self.units:
                scores = np.concatenate([member.scores[u] for u in range(len(self.units))], axis=1)
                hits = view.rank_scores(scores, view.documents, index.visual_depth(request.k, request.options), view.all_pages())
            results = index.finish(request.queries, hits, request.k, None, request.options)
        except Exception as exc:  # noqa: BLE001 - it fails this request only
            member.deliver(exc)
            return False
        member.deliver(self.make_answer(index, results, member.batch_queries, member.stacked))
        return True


def sweepable(request: Any, index: Any) -> bool:
    """Whether a request can join a sweep: exact scoring of every page of a local index (no filters, no
    first pass, not text mode); the others are scored in a pass of their own (IndexService.answer_encoded)."""
    try:
        return (not request.filters and request.first_pass is None and hasattr(index.view, "exact_units")
                and index.mode(request.options) != "text")
    except LgptError:
        return False  # a mode the index cannot answer: its own pass says why


def deliver_from_thread(future: asyncio.Future, loop: asyncio.AbstractEventLoop, answer) -> None:
    """`answer` (or the exception) to a request's future, from the model thread."""

    def settle() -> None:
        if future.done():  # the client went away
            return
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)

    loop.call_soon_threadsafe(settle)
