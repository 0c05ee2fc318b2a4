"""serve's sweep on its own (serve/sweep.py), over a view whose parts the test begins and ends: which
members a part takes, and when. The whole server's batching is tested in test_serve_batching.py."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np

from localgpt_index.serve.sweep import Member, Sweep


class Parts:
    """A view of `units` parts whose scoring begins when the test says (`begin`: the queries the part
    asked for then) and ends when it says (`end`: one score a query and page, the part's number)."""

    def __init__(self, units: int) -> None:
        self.units = list(range(units))
        self.started: dict[int, tuple] = {}  # unit -> (the queries function, its future)
        self.asked: dict[int, list] = {}

    def exact_units(self) -> list[int]:
        return self.units

    def parts_in_flight(self, device: str) -> int:
        return 2

    def start_unit(self, queries, unit: int, device: str) -> Future:
        assert callable(queries), "a part's queries are asked for when its scoring begins"
        self.started[unit] = (queries, Future())
        return self.started[unit][1]

    def begin(self, unit: int) -> list:
        self.asked[unit] = list(self.started[unit][0]())
        return self.asked[unit]

    def end(self, unit: int) -> None:
        self.started[unit][1].set_result(np.full((len(self.asked[unit]), 1), float(unit), dtype=np.float32))

    def fail(self, unit: int, exc: Exception) -> None:
        self.started[unit][1].set_exception(exc)

    def rank_scores(self, scores, documents, depth, pages):
        return [list(row) for row in scores]


class Generation:
    """The index a sweep goes over: its view, and answers that are the scores gathered."""

    documents: list = []

    def __init__(self, units: int) -> None:
        self.view = Parts(units)
        self.view.all_pages = lambda: None

    def prepare_scoring(self, device: str) -> Parts:
        return self.view

    def visual_depth(self, request) -> int:
        return request.k

    def finish(self, request, hits, vectors=None):
        return hits


class Request:
    queries, k = ("q",), 10


def member(answers: dict, name: str) -> Member:
    vector = np.full((2, 4), len(answers), dtype=np.float32)
    answers[name] = None
    return Member(Request(), [vector], None, lambda answer: answers.__setitem__(name, answer), lambda: False)


def sweep_of(units: int) -> tuple[Sweep, Parts, threading.Event]:
    wake = threading.Event()
    index = Generation(units)
    return Sweep(index, "cpu", lambda index, results, batch, stacked, vectors: (results, stacked), wake), index.view, wake


def started(units: int = 3) -> tuple[Sweep, Parts, threading.Event, dict, Member]:
    """A sweep of `units` parts that one member ("first") joined, stepped once: two parts in flight, not begun."""
    sweep, view, wake = sweep_of(units)
    answers: dict = {}
    first = member(answers, "first")
    sweep.join(first)
    step(sweep, wake)
    return sweep, view, wake, answers, first


def step(sweep: Sweep, wake: threading.Event) -> None:
    """One step that does not wait: parts started up to two in flight, the oldest finished if it ended."""
    wake.set()
    sweep.step()


def test_a_query_that_joins_before_a_queued_part_begins_is_on_it():
    sweep, view, wake, answers, first = started()
    assert sorted(view.started) == [0, 1]  # two parts in flight; the second queued behind the first
    assert len(view.begin(0)) == 1
    second = member(answers, "second")
    sweep.join(second)  # while part 0 is scored and part 1 waits
    assert [v[0, 0] for v in view.begin(1)] == [0, 1]  # part 1 took both
    for unit in (0, 1):
        view.end(unit)
        step(sweep, wake)
    assert sorted(view.started) == [0, 1, 2] and len(view.begin(2)) == 2
    view.end(2)
    step(sweep, wake)
    results, stacked = answers["first"]
    assert results == [[0.0, 1.0, 2.0]] and stacked == 2
    assert answers["second"] is None and second.remaining == {0}  # the part it missed comes round again
    step(sweep, wake)
    [again] = view.begin(0)
    assert again is second.vectors[0]
    view.end(0)
    step(sweep, wake)
    assert answers["second"][0] == [[0.0, 1.0, 2.0]] and not sweep.busy
    assert sweep.steps == 4 and sweep.shared == 2


def test_step_returns_when_woken_without_waiting_for_the_part():
    sweep, view, wake = sweep_of(2)
    answers: dict = {}
    sweep.join(member(answers, "one"))
    stepped = threading.Thread(target=sweep.step)
    stepped.start()
    stepped.join(0.2)
    assert stepped.is_alive()  # waiting for part 0 (nothing set `wake`)
    wake.set()  # as the batcher does when queries arrive
    stepped.join(30)
    assert not stepped.is_alive() and not view.asked and sweep.busy


def test_a_part_that_fails_before_it_begins_fails_the_members_needing_it():
    sweep, view, wake, answers, _ = started()
    view.fail(0, OSError("a damaged block"))
    step(sweep, wake)
    assert isinstance(answers["first"], OSError) and not sweep.members


def test_a_part_nobody_needs_when_it_begins_scores_nothing():
    sweep, view, wake, answers, first = started()
    sweep.abandon()
    later = member(answers, "later")
    sweep.join(later)  # the sweep is kept for its generation's next queries
    assert view.begin(1) == []  # an abandoned part takes nobody, even one that joined after
    assert first.remaining == later.remaining == set(range(3)) and not later.pending
