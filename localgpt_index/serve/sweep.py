"""Queries that join an exact scoring pass while it runs (continuous batching).

An exact pass goes through a generation's vectors part by part (the view's ExactScoring:
exact_units). A sweep goes round those parts for as long as any query needs them: a query that arrives while a pass runs joins
it at the next part to begin (a part takes the queries there when its scoring begins, not when it was
queued), is scored with every query already there on each part they both still need, and
is done once it has been round every part (the ones it missed come first on the next round). Each
part is read once for all the queries on it, no query waits for a pass to end before it starts, and
a lone query starts at once: no window, no clock. The view scores each part (the CPU scorer, or the
device scorer the query layer hands it): nothing here depends on where the scoring runs."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.errors import LgptError
from ..core.failpoints import failpoint


@dataclass(eq=False)
class Member:
    """One request's queries on a sweep: what it still needs and what it has got."""

    request: Any  # a QueryRequest
    vectors: list[np.ndarray]
    index: Any  # the generation (query.search.Searcher) it was encoded for
    deliver: Callable[[Any], None]  # its answer, or the exception that failed it
    cancelled: Callable[[], bool]
    batch_queries: int = 1  # queries encoded with it in one forward pass
    stacked: int = 0  # the most queries scored together on one part with it
    remaining: set[int] = field(default_factory=set)  # parts not yet begun for it
    pending: int = 0  # its parts being scored
    scores: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass(eq=False)
class _Part:
    """A part queued for scoring; its members are those needing it when its scoring begins (`board`)."""

    unit: int
    scoring: Future | None = None
    on: list[Member] | None = None  # None until boarded


class Sweep:
    """The exact pass of one generation, gone round while members need it.

    Parts are scored as LocalView.score_units scores them, parts_in_flight at once (two on the CPU
    scorer), and the model thread's work between parts (answers, joins) overlaps scoring. A part takes
    the members that need it when its scoring begins (with the compiled kernel: when a scorer thread
    takes its first chunk; elsewhere when its part thread starts), so a query that joins while the part
    before is scored is on it.
    Membership is kept under a lock for that; everything else runs on the model thread. `wake` is set
    whenever a part is done, and by the caller when queries arrive: step() waits for it."""

    def __init__(self, index: Any, device: str, answer: Callable[..., Any], wake: threading.Event | None = None) -> None:
        self.index, self.device = index, device
        self.make_answer = answer  # (index, results, batch_queries, scored_with, vectors) -> a BatchAnswer
        exact = index.prepare_scoring(device)  # a device scorer, when the service scores on one: a segment a part
        if exact is None:
            raise ValueError("a sweep goes over a generation whose pages are scored here (sweepable)")
        self.exact = exact
        self.units = exact.exact_units()
        self.depth = exact.parts_in_flight(device)
        self.wake = wake or threading.Event()
        self._flight: deque[_Part] = deque()
        self._lock = threading.Lock()  # members' membership: joins, boarding (on a scorer thread), results
        self.cursor = 0
        self.members: list[Member] = []
        self.steps = 0  # parts scored
        self.shared = 0  # parts scored for queries of more than one request

    @property
    def busy(self) -> bool:
        """Members on it, or parts still being scored."""
        return bool(self.members or self._flight)

    def join(self, member: Member) -> None:
        member.remaining = set(range(len(self.units)))
        with self._lock:
            self.members.append(member)

    def step(self) -> list[Member]:
        """Start the next parts members need (up to `depth` in flight), then wait for the oldest or for
        `wake`: the oldest part's scores kept and the members done answered, if it is done (else none,
        so that the caller can let queries that arrived join)."""
        with self._lock:
            self.members = [m for m in self.members if not m.cancelled()]
        if not self.units:  # an index without pages
            with self._lock:
                done, self.members = self.members, []
            return [m for m in done if self._answer(m)]
        while len(self._flight) < self.depth and self._start_next():
            pass
        if not self._flight:
            return []
        oldest = self._flight[0]
        assert oldest.scoring is not None
        if not oldest.scoring.done():
            self.wake.wait()
            self.wake.clear()  # whatever set it is seen below, or by the caller before the next step
        if not oldest.scoring.done():
            return []
        return self._finish(self._flight.popleft())

    def abandon(self) -> list[Member]:
        """Every member taken off (the caller fails them); parts not started are cancelled, those
        being scored finish unread, and those whose scoring has not begun take nobody (a query that
        joins later is not left on a part whose scores nobody reads)."""
        with self._lock:
            members, self.members = self.members, []
            for part in self._flight:
                if part.on is None:
                    part.on = []
        for part in self._flight:
            if part.scoring is not None:
                part.scoring.cancel()
        self._flight.clear()
        return members

    def _start_next(self) -> bool:
        """The next part (from the cursor, round the pass) a member still needs and none queued will give
        it, queued for scoring; False when there is none."""
        queued = {part.unit for part in self._flight if part.on is None}
        with self._lock:
            for _ in range(len(self.units)):
                unit = self.cursor
                self.cursor = (self.cursor + 1) % len(self.units)
                if unit not in queued and any(unit in m.remaining and not m.cancelled() for m in self.members):
                    break
            else:
                return False
        failpoint("serve.sweep")
        part = _Part(unit)
        part.scoring = self.exact.start_unit(lambda: self._board(part), self.units[unit], self.device)
        part.scoring.add_done_callback(lambda _: self.wake.set())
        self._flight.append(part)
        return True

    def _board(self, part: _Part) -> list[np.ndarray]:
        """The members needing the part take it (its scoring begins): their query vectors, stacked."""
        with self._lock:
            if part.on is None:
                part.on = [m for m in self.members if part.unit in m.remaining and not m.cancelled()]
                for member in part.on:
                    member.remaining.discard(part.unit)
                    member.pending += 1
        return [v for m in part.on for v in m.vectors]

    def _finish(self, part: _Part) -> list[Member]:
        """A part's scores to the members on it (those still on the sweep); the members done, answered."""
        assert part.scoring is not None
        try:
            scores = part.scoring.result()
        except Exception as exc:  # noqa: BLE001 - a damaged block: every query reading it fails with it
            self._board(part)  # (those it would have had, when it failed before its scoring began)
            with self._lock:
                failed = [m for m in part.on or [] if m in self.members]
                self.members = [m for m in self.members if m not in failed]
            for member in failed:
                member.deliver(exc)
            return []
        on = part.on or []
        with self._lock:
            self.steps += bool(on)
            self.shared += len(on) > 1
            at, stacked = 0, sum(len(m.vectors) for m in on)
            for member in on:
                member.scores[part.unit] = scores[at : at + len(member.vectors)]
                at += len(member.vectors)
                member.pending -= 1
                member.stacked = max(member.stacked, stacked)
            done = [m for m in self.members if not m.remaining and not m.pending]
            self.members = [m for m in self.members if m.remaining or m.pending]
        return [m for m in done if self._answer(m)]

    def _answer(self, member: Member) -> bool:
        """The member's answer delivered (or what failed it); True when it was an answer."""
        request, index = member.request, self.index
        try:
            hits: list = [[] for _ in member.vectors]
            if self.units:
                scores = np.concatenate([member.scores[u] for u in range(len(self.units))], axis=1)
                hits = self.exact.rank_scores(scores, index.documents, index.visual_depth(request), self.exact.all_pages())
            results = index.finish(request, hits, member.vectors)
        except Exception as exc:  # noqa: BLE001 - it fails this request only
            member.deliver(exc)
            return False
        member.deliver(self.make_answer(index, results, member.batch_queries, member.stacked, member.vectors))
        return True


def sweepable(request: Any, index: Any) -> bool:
    """Whether a request can join a sweep: exact scoring of every page of a local index (no filters, no
    first pass, not text mode); the others are scored in a pass of their own (IndexService.answer_encoded)."""
    try:
        return (not request.filters and request.first_pass is None and index.view.exact_scoring() is not None
                and index.mode(request) != "text")
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
