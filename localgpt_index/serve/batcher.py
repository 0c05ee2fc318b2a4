"""Queries of concurrent requests answered together: one forward pass for those that arrived together.

The pass runs on a thread of its own, while the model thread lets them join the exact pass in
flight (serve/sweep.py)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..core.errors import LgptError
from ..core.failpoints import failpoint
from ..models.protocols import QueryEncoder
from ..query.request import QueryRequest
from ..query.search import Searcher
from .service import IndexService, NotReady, BatchAnswer
from .sweep import Member, Sweep, deliver_from_thread, sweepable


class QueryBatcher:
    """Queries of concurrent requests scored together, with no window and no clock.

    Two threads of their own (the event loop never waits on them). The encoder thread takes every
    request that has arrived and encodes their queries in one forward pass, while the model thread
    scores: encoding a request never stops the pass in flight. The model thread lets the encoded
    queries join the sweep as they come (it stops waiting on a part for them): the exact pass over the
    current generation that is running, part by part,
    for the queries already on it (serve/sweep.py). A query arriving mid-pass shares every part from
    the next one on and comes round for the parts it missed; a lone query starts at once. Requests a
    sweep cannot take (filters, a first pass, text mode, a store that ranks itself) are scored in a
    stacked pass of their own between two parts."""

    MAX_QUERIES = 64  # on a sweep at once (each part's product and similarities grow with them); more wait

    def __init__(self, service: IndexService) -> None:
        self.service = service
        self.batches = 0  # forward passes (each for every request that had arrived)
        self.parts = self.shared_parts = 0  # parts of a pass scored, and those scored for several requests (ended sweeps)
        self._inbox: list[tuple[QueryRequest, asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._encoded: list[_Admitted] = []  # forward passes done, not yet taken by the model thread
        self._lock = threading.Lock()
        self._encoding = self._working = False
        self._sweep: Sweep | None = None
        self._arrived = threading.Event()  # set when queries are encoded: the model thread stops waiting on a part to let them join
        self._waiting: list[Member] = []  # encoded for a newer generation than the sweep's: next sweep
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="lgpt-encode")
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lgpt-model")

    def start(self) -> None:
        """Nothing to start: the threads work while there are requests."""

    async def stop(self) -> None:
        """Let the requests in flight finish (each thread returns once it has none)."""
        self._encoder.shutdown(wait=True)
        self._executor.shutdown(wait=True)

    @property
    def busy(self) -> bool:
        """Requests on its threads: being encoded or scored."""
        with self._lock:
            return self._encoding or self._working

    @property
    def queued(self) -> int:
        """Requests waiting to be scored: not encoded yet, or encoded and not yet taken by the model thread."""
        with self._lock:
            return len(self._inbox) + sum(len(a.members) + len(a.others) for a in self._encoded)

    async def submit(self, request: QueryRequest) -> BatchAnswer:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            self._inbox.append((request, future, loop))
            idle, self._encoding = not self._encoding, True
        if idle:
            self._encoder.submit(self._encode_arrived)
        return await future

    def _encode_arrived(self) -> None:
        """On the encoder thread: every request that arrived, encoded in one forward pass and handed to
        the model thread, until none is left."""
        while True:
            failpoint("serve.batch")
            with self._lock:
                arrived, self._inbox = self._inbox, []
                if not arrived:
                    self._encoding = False
                    return
            try:
                admitted = self._admit(arrived)
            except BaseException as exc:  # noqa: BLE001 - never leave a request unanswered
                for _, future, loop in arrived:
                    deliver_from_thread(future, loop, exc)
                continue
            if admitted is None:
                continue
            with self._lock:
                self._encoded.append(admitted)
                idle, self._working = not self._working, True
            self._arrived.set()
            failpoint("serve.encoded")
            if idle:
                self._executor.submit(self._work)

    def _work(self) -> None:
        """On the model thread: take what was encoded, score the next part of the sweep, until there is nothing left."""
        while True:
            with self._lock:
                encoded, self._encoded = self._encoded, []
                if not encoded and not self._busy():
                    self._end_sweep()  # idle: an old generation is not kept open by an empty sweep
                    self._working = False
                    return
            try:
                for admitted in encoded:
                    self._place(admitted)
                if self._sweep is not None and self._sweep.busy:
                    self._sweep.step()
                    if self._waiting:  # room left by those done
                        self._join_waiting()
                elif self._waiting:
                    self._start_sweep()
            except BaseException as exc:  # noqa: BLE001 - never leave a request unanswered
                for admitted in encoded:
                    admitted.fail(exc)  # those answered already are left as they are
                self._fail_everyone(exc)

    def _busy(self) -> bool:
        return bool(self._waiting) or (self._sweep is not None and self._sweep.busy)

    def _admit(self, arrived: list) -> _Admitted | None:
        """Encode the queries of every request that arrived in one forward pass: those a sweep can
        take as members, the others to be answered in a pass of their own (None: each was answered)."""
        self.batches += 1
        try:
            encoder = self.service.require_ready()
            index = self.service.index()
            if self.service.stale:
                raise NotReady(self.service.stale)
        except Exception as exc:  # noqa: BLE001 - not ready, or no index: each request says so
            for request, future, loop in arrived:
                deliver_from_thread(future, loop, exc)
            return None
        requests = [request for request, _, _ in arrived]
        encoded = _encode(encoder, requests)
        count = sum(len(r.queries) for r, vectors in zip(requests, encoded) if not isinstance(vectors, BaseException))
        admitted = _Admitted(index, count)
        for (request, future, loop), vectors in zip(arrived, encoded):
            if isinstance(vectors, BaseException):
                deliver_from_thread(future, loop, vectors)
            elif sweepable(request, index):
                deliver = functools.partial(deliver_from_thread, future, loop)
                admitted.members.append(Member(request, vectors, index, deliver, future.done, count))
            else:
                admitted.others.append((request, future, loop, vectors))
        return admitted if admitted.members or admitted.others else None

    def _place(self, admitted: _Admitted) -> None:
        """On the model thread: the others of one forward pass answered, its members on the sweep or waiting."""
        if admitted.others:
            self._answer_others(admitted.index, admitted.others, admitted.count)
        self._waiting += admitted.members
        if not self._waiting:
            return
        if self._sweep is None or (not self._sweep.busy and self._sweep.index is not self._waiting[0].index):
            self._start_sweep()
        else:  # those of the sweep's generation join it; a newer one's wait until it is done
            self._join_waiting()

    def _end_sweep(self) -> None:
        if self._sweep is not None:
            self.parts += self._sweep.steps
            self.shared_parts += self._sweep.shared
            self._sweep = None

    def _start_sweep(self) -> None:
        """A sweep over the generation the waiting requests were encoded for; they join it."""
        self._end_sweep()
        index = self._waiting[0].index
        device = self.service.encoder.precision.device if self.service.encoder is not None else "cpu"
        self._sweep = Sweep(index, device, BatchAnswer, self._arrived)
        self._join_waiting()

    def _join_waiting(self) -> None:
        """The waiting requests of the sweep's generation join it, up to MAX_QUERIES queries on it."""
        assert self._sweep is not None
        keep, on = [], sum(len(m.vectors) for m in self._sweep.members)
        for member in self._waiting:
            if member.index is self._sweep.index and (not on or on + len(member.vectors) <= self.MAX_QUERIES):
                self._sweep.join(member)
                on += len(member.vectors)
            else:
                keep.append(member)
        self._waiting = keep

    def _answer_others(self, index: Searcher, others: list, count: int) -> None:
        """Requests a sweep cannot take, in one stacked pass per kind; one that fails alone fails only itself."""
        answers: Sequence[BatchAnswer | Exception]
        try:
            answers = self.service.answer_encoded(index, [o[0] for o in others], [o[3] for o in others], count)
        except Exception:  # noqa: BLE001 - each request is tried alone
            alone: list[BatchAnswer | Exception] = []
            for request, _, _, vectors in others:
                try:
                    alone += self.service.answer_encoded(index, [request], [vectors], count)
                except Exception as exc:  # noqa: BLE001 - it fails this request only
                    alone.append(_request_error(exc))
            answers = alone
        for (_, future, loop, _), answer in zip(others, answers):
            deliver_from_thread(future, loop, answer)

    def _fail_everyone(self, exc: BaseException) -> None:
        members = (self._sweep.abandon() if self._sweep is not None else []) + self._waiting
        self._waiting = []
        for member in members:
            member.deliver(exc)

    def run_on_encoder_thread(self, work, *args):
        """`work(*args)` on the encoder thread (where the model runs), between two forward passes
        (a concurrent.futures.Future): loading and warming up the model (the warm-up sets this
        thread's torch threads)."""
        return self._encoder.submit(work, *args)


@dataclass
class _Admitted:
    """One forward pass's requests, encoded for generation `index`: sweep members, and the others."""

    index: Searcher
    count: int  # queries encoded in the pass
    members: list[Member] = field(default_factory=list)
    others: list[tuple] = field(default_factory=list)  # (request, future, loop, vectors)

    def fail(self, exc: BaseException) -> None:
        for member in self.members:
            member.deliver(exc)
        for _, future, loop, _ in self.others:
            deliver_from_thread(future, loop, exc)


def _encode(encoder: QueryEncoder, requests: list[QueryRequest]) -> list:
    """Each request's query vectors, from one forward pass for all; when that fails, each request
    is encoded alone, so that text the model cannot read fails its own request and no other."""
    texts = [text for request in requests for text in request.queries]
    try:
        vectors = iter(encoder.encode_queries(texts))
        return [[next(vectors) for _ in request.queries] for request in requests]
    except Exception as exc:  # noqa: BLE001 - any failure: each request is tried alone
        if len(requests) == 1:
            return [_request_error(exc)]
    encoded: list = []
    for request in requests:
        try:
            encoded.append(list(encoder.encode_queries(request.queries)))
        except Exception as exc:  # noqa: BLE001 - it fails this request only
            encoded.append(_request_error(exc))
    return encoded


def _request_error(exc: Exception) -> Exception:
    """What failed one request alone: text the tokenizer cannot read is the request's fault (a 4xx)."""
    from ..core.errors import UsageError

    if isinstance(exc, (TypeError, ValueError, UnicodeError)) and not isinstance(exc, LgptError):
        reason = " ".join(str(exc).split())[:200]
        return UsageError(f"queries: the model cannot read this request's text ({type(exc).__name__}: {reason}).")
    return exc
