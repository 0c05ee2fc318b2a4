"""A warm index for a long-lived process: the model loaded once, the current generation
followed, queries that arrive together answered together.

`IndexService` is the typed core of `lgpt-index serve` (app.py and routes.py put HTTP in front of
it). It notices a new HEAD (a build or remove beside it) between batches and opens the new
generation, reusing the segments it has already checked; a batch in flight keeps the
generation it started with, and the old one's memory maps go with the last reference.
`QueryBatcher` gathers the queries of requests that arrive within a few milliseconds into
one forward pass of the model and one scoring pass per filter.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import EnvironmentMissing, IndexProblem, LgptError
from ..core.failpoints import failpoint
from ..index.store import IndexStore, MissingIndexFile
from ..models.protocols import QueryEncoder, check_queries
from ..models.resolve import same_model
from ..query.search import DeviceScoring, Index, QueryOptions, SearchHit


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
        answers: list[SearchAnswer | LgptError] = []
        groups: dict[tuple, list[tuple[int, int]]] = {}
        per_request = []
        for number, request in enumerate(requests):
            per_request.append([next(vectors) for _ in request.queries])
            answers.append(SearchAnswer(index, [[] for _ in request.queries]))
            groups.setdefault((request.filters, request.first_pass), []).append((number, len(request.queries)))
        for answer in answers:
            answer.batch_queries = len(texts)
        for (filters, first_pass), members in groups.items():
            stacked = [v for number, _ in members for v in per_request[number]]
            k = max(index.visual_depth(requests[number].k, requests[number].options) for number, _ in members)
            hits = index.search_vectors(stacked, k, device=encoder.precision.device, filters=dict(filters) or None,
                                        candidates=first_pass)
            at = 0
            for number, count in members:
                request = requests[number]
                answers[number].results = index.finish(request.queries, hits[at : at + count], request.k,
                                                       dict(filters) or None, request.options)
                at += count
        return answers


class QueryBatcher:
    """Requests that arrive within a short window of each other share one model call and one scoring pass.

    The model runs on one thread of its own (the event loop never waits on it), one batch at a time.
    Clients answered together come back at slightly different times (each parses its answer and
    sends the next question): a batch waits, up to its window, for as many requests as the last
    one had, and goes as soon as they are there. A lone client is never kept waiting."""

    MAX_WINDOW_S = 0.05

    def __init__(self, service: IndexService, window_s: float = 0.002, max_queries: int = 64) -> None:
        self.service = service
        self.window_s = window_s  # a quarter of the time the last batch took, up to MAX_WINDOW_S
        self.max_queries = max_queries
        self.batches = 0
        self._expected = 1  # requests in the last batch: the clients likely to come back
        self._queue: asyncio.Queue | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lgpt-model")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=True)

    @property
    def queued(self) -> int:
        """Requests waiting for the model thread."""
        return self._queue.qsize() if self._queue is not None else 0

    async def submit(self, request: SearchRequest) -> SearchAnswer:
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((request, future))
        return await future

    async def _gather(self, first) -> list:
        """`first` and the requests that join it: all those already queued, then any that arrive
        within the window while the batch has fewer requests than the last one."""
        batch, count = [first], len(first[0].queries)
        deadline = time.monotonic() + self.window_s
        while count < self.max_queries:
            if self._queue.empty():
                left = deadline - time.monotonic()
                if len(batch) >= self._expected or left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), left)
                except asyncio.TimeoutError:
                    break
            else:
                item = self._queue.get_nowait()
            batch.append(item)
            count += len(item[0].queries)
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather(await self._queue.get())
            self.batches += 1
            started = time.monotonic()
            answers = await loop.run_in_executor(self._executor, self._answer, [r for r, _ in batch])
            self.window_s = min(self.MAX_WINDOW_S, max(0.002, 0.25 * (time.monotonic() - started)))
            self._expected = len(batch)
            for (_, future), answer in zip(batch, answers):
                if future.done():
                    continue
                if isinstance(answer, BaseException):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)


    def _answer(self, requests: list[SearchRequest]) -> list:
        """Answers for a batch (on the model thread). When the batch fails, each request is answered
        alone, so that one query the model cannot read fails its own request and no other."""
        failpoint("serve.batch")
        try:
            return self.service.search(requests)
        except NotReady as exc:
            return [exc] * len(requests)
        except Exception as exc:  # noqa: BLE001 - any failure: each request is tried alone
            if len(requests) == 1:
                return [_request_error(exc)]
        answers: list = []
        for request in requests:
            try:
                answers += self.service.search([request])
            except Exception as exc:  # noqa: BLE001 - it fails this request only
                answers.append(_request_error(exc))
        return answers

    def run_on_model_thread(self, work, *args):
        """`work(*args)` on the model thread, between batches (a concurrent.futures.Future)."""
        return self._executor.submit(work, *args)


def _request_error(exc: Exception) -> Exception:
    """What failed one request alone: text the tokenizer cannot read is the request's fault (a 4xx)."""
    from ..core.errors import UsageError

    if isinstance(exc, (TypeError, ValueError, UnicodeError)) and not isinstance(exc, LgptError):
        reason = " ".join(str(exc).split())[:200]
        return UsageError(f"queries: the model cannot read this request's text ({type(exc).__name__}: {reason}).")
    return exc


# How long an idle OpenMP thread of torch's spins before it sleeps (GNU OpenMP's GOMP_SPINCOUNT;
# its default, 300,000, is milliseconds). After each query's encoding the model thread's idle
# OpenMP worker kept spinning while the scorer's threads wanted every core: measured on a 2-core
# EPYC, 5-8 ms of a core after every encoding (a warm /query about 4 ms slower than when the scorer
# ran inside torch's own team), none with a short spin, the encoding itself no slower.
OPENMP_SPIN = "1000"


def quiet_openmp_spinning() -> None:
    """Short OpenMP spinning for this serving process, once, before torch is loaded (GNU OpenMP reads
    it when torch loads it); a value the user set wins, and once torch is loaded it changes nothing."""
    if "torch" not in sys.modules:
        os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN)


def open_service(store, device: str = "auto", dtype: str = "auto", scoring: DeviceScoring | None = None) -> IndexService:
    """A service on `store` (its model not loaded yet): a missing or damaged index fails here."""
    quiet_openmp_spinning()
    service = IndexService(store, device, dtype)
    service.scoring = scoring or service.scoring
    if not service.store.exists():
        raise IndexProblem(f"no index at {service.store.location}.",
                           hint="Build one first: lgpt-index build DOCS (or pass --index-dir / --name / --store).")
    service.index()
    return service

