"""A warm index for a long-lived process: the model loaded once, the current generation
followed, queries that arrive together answered together.

`IndexService` is the typed core of `lgpt-index serve` (app.py and routes.py put HTTP in front of
it). It notices a new HEAD (a build or remove beside it) between batches and opens the new
generation, reusing the segments it has already checked; a batch in flight keeps the
generation it started with, and the old one's memory maps go with the last reference.
`QueryBatcher` encodes the queries of requests that arrived together in one forward pass of the
model and lets them join the exact scoring pass in flight (serve/sweep.py).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..core.cpus import short_openmp_spin
from ..core.errors import EnvironmentMissing, IndexProblem, LgptError
from ..core.failpoints import failpoint
from ..index.store import IndexStore, MissingIndexFile
from ..index import score
from ..models.protocols import QueryEncoder, check_queries
from ..models.resolve import same_model
from ..query.search import DeviceScoring, Index, QueryOptions, SearchHit
from .sweep import Member, Sweep, deliver_from_thread as _deliver, sweepable


KERNEL_WAIT_S = 120  # the warm-up waits this long at most for the compiled kernel (compiled where numba has no cache: seconds)


class NotReady(LgptError):
    """The model is still loading, failed to load, or no longer matches the index."""

    exit_code = EnvironmentMissing.exit_code


@dataclass(frozen=True)
class SearchRequest:
    queries: tuple[str, ...]
    k: int = 5
    filters: tuple[tuple[str, str], ...] = ()
    first_pass: int | None = None
    options: QueryOptions = field(default_factory=QueryOptions)  # mode and fusion


@dataclass
class SearchAnswer:
    index: Index  # the generation that answered
    results: list[list[SearchHit]] = field(default_factory=list)
    batch_queries: int = 0  # how many queries shared its forward pass
    scored_with: int = 0  # the most queries scored together with its own (one stacked pass, or one part of a sweep)


class IndexService:
    """One index, its model loaded once, its current generation followed."""

    def __init__(self, store, device: str = "auto", dtype: str = "auto") -> None:
        self.store = store if not isinstance(store, (str, Path)) else IndexStore(Path(store))
        self.device, self.dtype = device, dtype
        self.encoder: QueryEncoder | None = None
        self.failure: LgptError | None = None  # why the model could not be loaded
        self.stale: str | None = None  # why the current generation cannot be queried with this model
        self.warmed = False  # the warm-up query has run
        self._index: Index | None = None
        self._head_key: tuple | None = None
        self._lock = threading.Lock()
        self.switches = 0
        self.scoring = DeviceScoring()  # where exact scoring runs (serve --scorer, --max-resident)

    # the generation

    def index(self) -> Index:
        """The current generation: reopened when HEAD changed since the last call."""
        key = self.store.head_key()
        with self._lock:
            if self._index is None or key != self._head_key:
                self._switch(key)
            return self._index

    def _switch(self, key) -> None:
        for attempt in range(3):
            store = self._index.store.reopened() if self._index is not None else self.store
            try:
                index = Index(store.open_view(), scoring=self.scoring)
                break
            except MissingIndexFile:
                if attempt == 2:
                    raise
                key = self.store.head_key()  # a writer committed and collected meanwhile
        if self._index is not None:
            self.switches += 1
            self._index.release_device()  # the old generation's resident vectors (a batch in flight keeps what it holds)
        self._index, self._head_key = index, key
        self._check_model()

    def _check_model(self) -> None:
        if self.encoder is None:
            return
        recorded = self._index.manifest.model
        if not same_model(self.encoder.model, recorded.fingerprint, recorded.fingerprint_scheme):
            self.stale = (f"the index was rebuilt with another model ({recorded.id}); this server has "
                          f"{self.encoder.model.id} loaded: restart it")
        else:
            self.stale = None

    # the model

    def load(self) -> None:
        """Load the model the index was built with (seconds to minutes); records a failure instead of raising."""
        try:
            index = self.index()
            score.warm_up()  # a long-lived process: the CPU scorer's compiled kernel loads beside the model
            encoder = index.load_encoder(device=self.device, dtype=self.dtype)
            self.encoder = encoder
            with self._lock:
                self._check_model()
        except LgptError as exc:
            self.failure = exc
        except Exception as exc:  # noqa: BLE001 - the model libraries raise OSError, RuntimeError, ValueError...
            reason = " ".join(str(exc).split())[:300] or "no reason given"
            self.failure = EnvironmentMissing(f"{type(exc).__name__} while loading the model: {reason}")

    def warm_up(self) -> None:
        """One query through the model and the scorer, so that the first client does not pay for
        what loads lazily (kernels, torch's scorer). Run it on the model thread (QueryBatcher)."""
        failpoint("serve.warm_up")
        try:
            self.search([SearchRequest(("warm up",), 1)])
        except LgptError:
            pass  # an empty index, a stale one: real requests will say so
        finally:
            score.kernel_policy.wait(KERNEL_WAIT_S)  # its load, begun beside the model's, ended: clients get the kernel
            self.warmed = True

    @property
    def ready(self) -> bool:
        return self.encoder is not None and self.failure is None

    def require_ready(self) -> QueryEncoder:
        if self.failure is not None:
            raise NotReady(f"the model could not be loaded: {self.failure.message}")
        if self.encoder is None:
            raise NotReady("the model is still loading")
        if self.stale:
            raise NotReady(self.stale)
        return self.encoder

    # queries

    def search(self, requests: list[SearchRequest]) -> list[SearchAnswer | LgptError]:
        """Answer several requests with one forward pass for all their queries, and one scoring
        pass per distinct (filters, first pass). Every request sees the same generation."""
        encoder = self.require_ready()
        index = self.index()
        if self.stale:
            raise NotReady(self.stale)
        texts = [text for request in requests for text in request.queries]
        vectors = iter(encoder.encode_queries(check_queries(texts)))
        per_request = [[next(vectors) for _ in request.queries] for request in requests]
        return self.answer_encoded(index, requests, per_request, len(texts))

    def answer_encoded(self, index: Index, requests: list[SearchRequest], per_request: list[list],
                       batch_queries: int) -> list[SearchAnswer | LgptError]:
        """Requests whose queries are encoded (`per_request`): one stacked scoring pass per distinct
        (filters, first pass), split per request."""
        device = self.encoder.precision.device if self.encoder is not None else "cpu"
        answers: list[SearchAnswer | LgptError] = [SearchAnswer(index, [[] for _ in r.queries], batch_queries) for r in requests]
        groups: dict[tuple, list[int]] = {}
        for number, request in enumerate(requests):
            groups.setdefault((request.filters, request.first_pass), []).append(number)
        for (filters, first_pass), members in groups.items():
            stacked = [v for number in members for v in per_request[number]]
            k = max(index.visual_depth(requests[number].k, requests[number].options) for number in members)
            hits = index.search_vectors(stacked, k, device=device, filters=dict(filters) or None, candidates=first_pass)
            at = 0
            for number in members:
                request, answer = requests[number], answers[number]
                assert isinstance(answer, SearchAnswer)
                answer.results = index.finish(request.queries, hits[at : at + len(request.queries)], request.k,
                                              dict(filters) or None, request.options)
                answer.scored_with = len(stacked)
                at += len(request.queries)
        return answers


class QueryBatcher:
    """Queries of concurrent requests scored together, with no window and no clock.

    One thread of its own (the model thread; the event loop never waits on it) takes every request
    that has arrived, encodes their queries in one forward pass, and lets them join the sweep: the
    exact pass over the current generation that is running, part by part, for the queries already
    on it (serve/sweep.py). A query arriving mid-pass shares every part from the next one on and
    comes round for the parts it missed; a lone query starts at once. Requests a sweep cannot take
    (filters, a first pass, text mode, a store that ranks itself) are scored in a stacked pass of
    their own between two parts."""

    MAX_QUERIES = 64  # on a sweep at once (each part's product and similarities grow with them); more wait

    def __init__(self, service: IndexService) -> None:
        self.service = service
        self.batches = 0  # forward passes (each for every request that had arrived)
        self.parts = self.shared_parts = 0  # parts of a pass scored, and those scored for several requests (ended sweeps)
        self._inbox: list[tuple[SearchRequest, asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._lock = threading.Lock()
        self._working = False
        self._sweep: Sweep | None = None
        self._waiting: list[Member] = []  # encoded for a newer generation than the sweep's: next sweep
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lgpt-model")

    def start(self) -> None:
        """Nothing to start: the model thread works while there are requests."""

    async def stop(self) -> None:
        """Let the requests in flight finish (the model thread returns once it has none)."""
        self._executor.shutdown(wait=True)

    @property
    def queued(self) -> int:
        """Requests waiting for the model thread."""
        return len(self._inbox)


    async def submit(self, request: SearchRequest) -> SearchAnswer:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            self._inbox.append((request, future, loop))
            idle, self._working = not self._working, True
        if idle:
            self._executor.submit(self._work)
        return await future

    def _work(self) -> None:
        """On the model thread: admit what arrived, score the next part of the sweep, until there is nothing left."""
        while True:
            with self._lock:
                arrived, self._inbox = self._inbox, []
                if not arrived and not self._busy():
                    self._end_sweep()  # idle: an old generation is not kept open by an empty sweep
                    self._working = False
                    return
            try:
                if arrived:
                    self._admit(arrived)
                if self._sweep is not None and self._sweep.members:
                    self._sweep.step()
                    if self._waiting:  # room left by those done
                        self._join_waiting()
                elif self._waiting:
                    self._start_sweep()
            except BaseException as exc:  # noqa: BLE001 - never leave a request unanswered
                for _, future, loop in arrived:
                    _deliver(future, loop, exc)  # those answered already are left as they are
                self._fail_everyone(exc)

    def _busy(self) -> bool:
        return bool(self._waiting) or (self._sweep is not None and bool(self._sweep.members))

    def _admit(self, arrived: list) -> None:
        """Encode the queries of every request that arrived in one forward pass; each joins the sweep
        or is answered in a pass of its own."""
        self.batches += 1
        failpoint("serve.batch")
        try:
            encoder = self.service.require_ready()
            index = self.service.index()
            if self.service.stale:
                raise NotReady(self.service.stale)
        except Exception as exc:  # noqa: BLE001 - not ready, or no index: each request says so
            for request, future, loop in arrived:
                _deliver(future, loop, exc)
            return
        requests = [request for request, _, _ in arrived]
        encoded = _encode(encoder, requests)
        count = sum(len(r.queries) for r, vectors in zip(requests, encoded) if not isinstance(vectors, BaseException))
        others = []
        for (request, future, loop), vectors in zip(arrived, encoded):
            if isinstance(vectors, BaseException):
                _deliver(future, loop, vectors)
            elif sweepable(request, index):
                member = Member(request, vectors, index, functools.partial(_deliver, future, loop), future.done, count)
                self._waiting.append(member)
            else:
                others.append((request, future, loop, vectors))
        if others:
            self._answer_others(index, others, count)
        if not self._waiting:
            return
        if self._sweep is None or (not self._sweep.members and self._sweep.index is not self._waiting[0].index):
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
        self._sweep = Sweep(index, device, SearchAnswer)
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

    def _answer_others(self, index: Index, others: list, count: int) -> None:
        """Requests a sweep cannot take, in one stacked pass per kind; one that fails alone fails only itself."""
        try:
            answers = self.service.answer_encoded(index, [o[0] for o in others], [o[3] for o in others], count)
        except Exception:  # noqa: BLE001 - each request is tried alone
            answers = []
            for request, _, _, vectors in others:
                try:
                    answers += self.service.answer_encoded(index, [request], [vectors], count)
                except Exception as exc:  # noqa: BLE001 - it fails this request only
                    answers.append(_request_error(exc))
        for (_, future, loop, _), answer in zip(others, answers):
            _deliver(future, loop, answer)

    def _fail_everyone(self, exc: BaseException) -> None:
        members = (self._sweep.members if self._sweep is not None else []) + self._waiting
        self._waiting = []
        if self._sweep is not None:
            self._sweep.members = []
        for member in members:
            member.deliver(exc)

    def run_on_model_thread(self, work, *args):
        """`work(*args)` on the model thread, when it has no request (a concurrent.futures.Future)."""
        return self._executor.submit(work, *args)


def _encode(encoder: QueryEncoder, requests: list[SearchRequest]) -> list:
    """Each request's query vectors, from one forward pass for all; when that fails, each request
    is encoded alone, so that text the model cannot read fails its own request and no other."""
    texts = [text for request in requests for text in request.queries]
    try:
        vectors = iter(encoder.encode_queries(check_queries(texts)))
        return [[next(vectors) for _ in request.queries] for request in requests]
    except Exception as exc:  # noqa: BLE001 - any failure: each request is tried alone
        if len(requests) == 1:
            return [_request_error(exc)]
    encoded: list = []
    for request in requests:
        try:
            encoded.append(list(encoder.encode_queries(check_queries(list(request.queries)))))
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


def open_service(store, device: str = "auto", dtype: str = "auto", scoring: DeviceScoring | None = None) -> IndexService:
    """A service on `store` (its model not loaded yet): a missing or damaged index fails here."""
    short_openmp_spin()
    service = IndexService(store, device, dtype)
    service.scoring = scoring or service.scoring
    if not service.store.exists():
        raise IndexProblem(f"no index at {service.store.location}.",
                           hint="Build one first: lgpt-index build DOCS (or pass --index-dir / --name / --store).")
    service.index()
    return service

