"""`serve`'s batching: queries that arrive while an exact pass runs join it (serve/sweep.py), with no
window and no clock. The model thread (scoring) and the encoder thread are held on failpoints
(failpoints.set_hook) while the next requests arrive; nothing here waits on a timer."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from conftest import run_cli
from docgen import make_pdf
from helpers import first_part_held_until_a_second_starts

from localgpt_index.core import failpoints
from localgpt_index.core.errors import UsageError
from localgpt_index.query.request import QueryRequest



@pytest.fixture
def service(fake_model, tmp_path, monkeypatch):
    from localgpt_index.index.local.segments import SegmentFiles
    from localgpt_index.serve.service import IndexService

    docs, index = tmp_path / "docs", tmp_path / "idx"
    for number in range(4):
        make_pdf(docs / f"doc-{number}.pdf", [f"page {number} {p}" for p in range(3)])
    rules = tmp_path / "meta.json"
    rules.write_text(json.dumps({"doc-0.pdf": {"team": "finance"}}))
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--metadata", str(rules)).exit_code == 0
    monkeypatch.setattr(SegmentFiles, "GROUP_BYTES", 1)  # a part a page: the pass has 12 parts to join between
    service = IndexService(index / "default")
    service.load()
    yield service
    failpoints.set_hook(None)
    HELD.clear()


class Held:
    """A thread held at the `at`-th time it reaches failpoint `name` until released (`hold=False`: only
    seen). Several may be set at once: the failpoint hook asks each."""

    def __init__(self, name: str, at: int = 1, hold: bool = True) -> None:
        self.name, self.at, self.hold, self.count = name, at, hold, 0
        self.reached, self.release = threading.Event(), threading.Event()
        HELD.append(self)
        failpoints.set_hook(_reached)

    def __call__(self, name: str) -> None:
        if name == self.name:
            self.count += 1
            if self.count == self.at:
                self.reached.set()
                assert not self.hold or self.release.wait(60)

    async def wait(self) -> None:
        assert await asyncio.get_running_loop().run_in_executor(None, self.reached.wait, 60)


HELD: list[Held] = []


def _reached(name: str) -> None:
    for held in list(HELD):
        held(name)


def second_forward_pass() -> Held:
    """The encoder thread held before it takes what arrived for its second forward pass (set before the
    first request, so that nothing it does before can be missed)."""
    return Held("serve.batch", at=2)


async def encoded_together(gate: Held, *requests, batcher) -> list:
    """`requests` submitted while the encoder thread is held at `gate`, then encoded in one forward pass
    and handed to the model thread."""
    await gate.wait()
    handed = Held("serve.encoded", hold=False)
    later = [asyncio.ensure_future(batcher.submit(r)) for r in requests]
    await asyncio.sleep(0)  # they are in the inbox
    gate.release.set()
    await handed.wait()
    return later


class Ranked(list):
    """Each query's (path, page) ranking, equal to another's when its scores are equal within float32 rounding
    (a query's products can round differently stacked with others)."""

    def __init__(self, answer) -> None:
        super().__init__([[(h.path, h.page) for h in hits] for hits in answer.results])
        self.scores = [h.score for hits in answer.results for h in hits]

    def __eq__(self, other) -> bool:
        return list.__eq__(self, other) and self.scores == pytest.approx(other.scores, rel=1e-5, abs=1e-6)


def ranked(answer) -> Ranked:
    return Ranked(answer)


def alone(service, request):
    return ranked(service.search([request])[0])


def test_a_query_arriving_mid_pass_joins_it_and_gets_what_it_gets_alone(service):
    from localgpt_index.serve.batcher import QueryBatcher

    first = QueryRequest(queries=("page 1",), k=5, mode="visual")
    second = QueryRequest(queries=("page 2", "doc 3"), k=3, mode="visual")
    filtered = QueryRequest(queries=("page 0",), k=5, filters={"team": "finance"}, mode="visual")  # a pass of its own
    hybrid = QueryRequest(queries=("page 3",), k=4)  # the index has text: hybrid by default
    expected = [alone(service, r) for r in (first, second, filtered, hybrid)]
    units = len(service.index().view.exact_units())
    assert units == 12 and expected[2][0]  # the filter matches a document

    async def scenario():
        batcher = QueryBatcher(service)
        held = Held("serve.sweep", at=3)  # the first query alone on its third part
        gate = second_forward_pass()
        one = asyncio.ensure_future(batcher.submit(first))
        await held.wait()
        later = await encoded_together(gate, second, filtered, hybrid, batcher=batcher)
        held.release.set()
        answers = await asyncio.gather(one, *later)
        await batcher.stop()
        return batcher, answers

    batcher, answers = asyncio.run(scenario())
    assert [ranked(a) for a in answers] == expected
    # the first query took 12 parts; the two that joined at its fourth (the filtered one had a pass of
    # its own) took the 9 left with it, then came round for the 3 they missed: 15 parts scored, not
    # 12 + 12 (a pass of their own after it), each after the first three shared by several requests
    assert batcher.parts == units + 3 and batcher.shared_parts == units
    assert answers[0].scored_with == 1 + 2 + 1 and answers[1].scored_with == 4 and answers[3].scored_with == 4
    assert answers[1].batch_queries == 2 + 1 + 1  # the three that came together: one forward pass
    assert batcher.batches == 2


def test_a_query_the_model_cannot_read_fails_alone(service, monkeypatch):
    from localgpt_index.serve.batcher import QueryBatcher

    encoder = service.encoder
    real = encoder.encode_queries

    def encode(texts):
        if any("unreadable" in t for t in texts):
            raise ValueError("a token the tokenizer cannot read")
        return real(texts)

    good = QueryRequest(queries=("page 1",), k=5, mode="visual")
    expected = alone(service, good)
    monkeypatch.setattr(encoder, "encode_queries", encode)

    async def scenario():
        batcher = QueryBatcher(service)
        held = Held("serve.sweep", at=1)
        gate = second_forward_pass()
        first = asyncio.ensure_future(batcher.submit(good))
        await held.wait()
        bad, other = await encoded_together(gate, QueryRequest(queries=("unreadable",), k=5, mode="visual"), good, batcher=batcher)
        held.release.set()
        answers = await asyncio.gather(first, bad, other, return_exceptions=True)
        await batcher.stop()
        return answers

    first, bad, other = asyncio.run(scenario())
    assert isinstance(bad, UsageError) and "cannot read" in bad.message
    assert ranked(first) == expected and ranked(other) == expected and other.scored_with == 2


def test_a_client_that_goes_away_leaves_the_pass(service):
    from localgpt_index.serve.batcher import QueryBatcher

    request = QueryRequest(queries=("page 1",), k=5, mode="visual")
    expected = alone(service, request)

    async def scenario():
        batcher = QueryBatcher(service)
        held = Held("serve.sweep", at=1)
        gate = second_forward_pass()
        gone = asyncio.ensure_future(batcher.submit(request))
        await held.wait()  # on its first part
        [stays] = await encoded_together(gate, request, batcher=batcher)
        gone.cancel()
        await asyncio.sleep(0)  # the cancellation reaches the future before the pass goes on
        held.release.set()
        answer = await stays
        await batcher.stop()
        return batcher, answer, gone

    batcher, answer, gone = asyncio.run(scenario())
    assert gone.cancelled() and ranked(answer) == expected and answer.scored_with == 1
    # it left before its first part's scoring began (parts take their members then): none was scored for it
    assert batcher.parts == 12 and batcher.shared_parts == 0


def test_queries_after_a_new_generation_wait_for_the_old_pass_then_see_it(service, fake_model, tmp_path):
    from localgpt_index.serve.batcher import QueryBatcher

    request = QueryRequest(queries=("page",), k=20, mode="visual")
    docs = tmp_path / "docs"

    async def scenario():
        batcher = QueryBatcher(service)
        held = Held("serve.sweep", at=2)
        gate = second_forward_pass()
        old = asyncio.ensure_future(batcher.submit(request))
        await held.wait()
        make_pdf(docs / "added.pdf", ["added page"])
        assert run_cli("build", str(docs), "--index-dir", str(tmp_path / "idx")).exit_code == 0
        [new] = await encoded_together(gate, request, batcher=batcher)  # for the new generation
        held.release.set()
        answers = await asyncio.gather(old, new)
        await batcher.stop()
        return answers

    old, new = asyncio.run(scenario())
    assert old.index.manifest.generation + 1 == new.index.manifest.generation
    assert len(old.results[0]) == 12 and len(new.results[0]) == 13
    assert old.scored_with == 1 and new.scored_with == 1  # never on one pass: their pages differ


@pytest.mark.slow  # the torch scorer
def test_queries_sharing_a_pass_on_the_torch_scorer_change_no_process_wide_setting(service, monkeypatch):
    import torch

    import localgpt_index.index.scoring.maxsim as score_module
    from localgpt_index.serve.batcher import QueryBatcher

    monkeypatch.setattr(score_module, "SCORE_WORKERS", 2)  # the scorer's threads, even on one core
    requests = [QueryRequest(queries=(f"page {n}",), k=5, mode="visual") for n in range(4)]
    expected = [alone(service, r) for r in requests]  # the scorer's threads start here, once
    before = torch.get_num_threads()
    calls: list = []
    for name in ("set_num_threads", "set_num_interop_threads"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda n, name=name, real=real: (calls.append((name, n)), real(n))[1])

    async def scenario():
        batcher = QueryBatcher(service)
        held = Held("serve.sweep", at=2)
        gate = second_forward_pass()
        first = asyncio.ensure_future(batcher.submit(requests[0]))
        await held.wait()
        later = await encoded_together(gate, *requests[1:], batcher=batcher)
        held.release.set()
        answers = await asyncio.gather(first, *later)
        await batcher.stop()
        return batcher, answers

    batcher, answers = asyncio.run(scenario())
    assert [ranked(a) for a in answers] == expected and batcher.shared_parts > 0
    assert calls == [] and torch.get_num_threads() == before


def test_at_most_max_queries_are_on_a_pass_the_others_join_as_room_is_left(service, monkeypatch):
    from localgpt_index.serve.batcher import QueryBatcher

    monkeypatch.setattr(QueryBatcher, "MAX_QUERIES", 2)
    requests = [QueryRequest(queries=(f"page {n}",), k=5, mode="visual") for n in range(4)]
    requests.append(QueryRequest(queries=("a", "b", "c"), k=5, mode="visual"))
    expected = [alone(service, r) for r in requests]

    async def scenario():
        batcher = QueryBatcher(service)
        held = Held("serve.batch", at=1)  # all of them arrive while the encoder thread waits
        tasks = [asyncio.ensure_future(batcher.submit(r)) for r in requests]
        await held.wait()
        await asyncio.sleep(0)
        held.release.set()
        answers = await asyncio.gather(*tasks)
        await batcher.stop()
        return answers

    answers = asyncio.run(scenario())
    assert [ranked(a) for a in answers] == expected
    assert [a.scored_with for a in answers[:4]] == [2, 2, 2, 2] and answers[4].scored_with == 3  # a request larger than the cap goes alone


@pytest.mark.slow  # a real model
def test_serve_chooses_the_encoder_threads_at_its_warm_up(tiny_model, tmp_path):
    """The warm-up times a query's forward pass and keeps the faster thread count for the encoder thread
    (models.tuning.query_threads); the ready line says which."""
    import re

    from helpers import wait_until
    from served import Server

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "report.pdf", ["revenue", "costs"])
    assert run_cli("build", str(docs), "--model", str(tiny_model), "--index-dir", str(index)).exit_code == 0
    server = Server("--index-dir", str(index))
    try:
        server.wait_ready(timeout=300)
        ready = wait_until(lambda: [line for line in server.lines if line.startswith("ready:")], what="the ready line", proc=server.proc)
        assert len(ready) == 1 and re.search(r"queries encoded with \d+ torch threads\)$", ready[0]), server.lines
    finally:
        assert server.stop() == 0


def test_the_next_part_starts_while_the_last_one_is_still_scored(service, monkeypatch):
    """Two parts of a sweep are in flight: the next part is scored while the one before is, so a scorer
    thread that finds no chunk left of a part goes on to the next instead of waiting for the others."""
    from localgpt_index.serve.batcher import QueryBatcher

    request = QueryRequest(queries=("page 1",), k=5, mode="visual")
    expected = alone(service, request)
    started = first_part_held_until_a_second_starts(monkeypatch)

    async def scenario():
        batcher = QueryBatcher(service)
        answer = await batcher.submit(request)
        await batcher.stop()
        return batcher, answer

    batcher, answer = asyncio.run(scenario())
    assert ranked(answer) == expected and batcher.parts == len(started) == 12
