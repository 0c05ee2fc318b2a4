"""A warm index for a long-lived process: the model loaded once, the current generation followed.

Queries that arrive together are answered together.

`IndexService` is the typed core of `lgpt-index serve` (app.py and routes.py put HTTP in front of
it). It notices a new HEAD (a build or remove beside it) between batches and opens the new
generation, reusing the segments it has already checked; a batch in flight keeps the
generation it started with, and the old one's memory maps go with the last reference.
`QueryBatcher` (batcher.py) answers the requests of concurrent clients together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.cpus import short_openmp_spin
from ..core.errors import EnvironmentMissing, IndexProblem, LgptError, MissingIndexFile
from ..core.failpoints import failpoint
from ..core.types import MODES, Mode
from ..index.local.store import LocalStore
from ..index.scoring import maxsim as score
from ..models.protocols import QueryEncoder
from ..models.resolve import ModelSpec, same_model
from ..models.tuning import query_threads
from ..query.request import QueryRequest
from ..query.search import DeviceScoring, SearchHit, Searcher


TUNING_QUERY = "what was the revenue growth in the third quarter"  # a typical question's length


KERNEL_WAIT_S = 120  # the warm-up waits this long at most for the compiled kernel (compiled where numba has no cache: seconds)


class NotReady(LgptError):
    """The model is still loading, failed to load, or no longer matches the index."""

    exit_code = EnvironmentMissing.exit_code


@dataclass
class BatchAnswer:
    index: Searcher  # the generation that answered
    results: list[list[SearchHit]] = field(default_factory=list)
    batch_queries: int = 0  # how many queries shared its forward pass
    scored_with: int = 0  # the most queries scored together with its own (one stacked pass, or one part of a sweep)
    vectors: list = field(default_factory=list)  # its queries' vectors (what their visual regions are found from)


class IndexService:
    """One index, its model loaded once, its current generation followed."""

    def __init__(self, store, model: ModelSpec = ModelSpec()) -> None:
        self.store = store if not isinstance(store, (str, Path)) else LocalStore(Path(store))
        self.model = model  # the index's model: the spec's device and dtype
        self.encoder: QueryEncoder | None = None
        self.failure: LgptError | None = None  # why the model could not be loaded
        self.stale: str | None = None  # why the current generation cannot be queried with this model
        self.warmed = False  # the warm-up query has run
        self.query_threads: int | None = None  # torch threads of the encoder thread, chosen at the warm-up
        self._index: Searcher | None = None
        self._head_key: tuple | None = None
        self._lock = threading.Lock()
        self.switches = 0
        self.scoring = DeviceScoring()  # where exact scoring runs (serve --scorer, --max-resident)
        self.on_switch: Callable[[Searcher], None] = lambda index: None  # told of each generation opened (serve's path policy)
        self.watch_status: Callable[[], dict] | None = None  # --watch: the watcher's status() (/healthz, index_status)

    # the generation

    def index(self) -> Searcher:
        """The current generation: reopened when HEAD changed since the last call."""
        key = self.store.head_key()
        with self._lock:
            if self._index is None or key != self._head_key:
                return self._switch(key)
            return self._index

    def _switch(self, key) -> Searcher:
        for attempt in range(3):
            store = self._index.store.reopened() if self._index is not None else self.store
            try:
                index = Searcher(store.open_view(), scoring=self.scoring)
                break
            except MissingIndexFile:
                if attempt == 2:
                    raise
                key = self.store.head_key()  # a writer committed and collected meanwhile
        if self._index is not None:
            self.switches += 1
            self._index.release_device()  # the old generation's resident vectors (a batch in flight keeps what it holds)
        if self.encoder is not None:
            index.use_encoder(self.encoder)  # its hybrid queries calibrate the visual list with it (query.hybrid.visual_prior)
        self._index, self._head_key = index, key
        try:
            self.on_switch(index)  # before _check_model: its message names the new generation's model
        finally:
            self._check_model()
        return index

    def _check_model(self) -> None:
        if self.encoder is None:
            return
        assert self._index is not None, "the encoder loads after the first generation is open (load)"
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
            failpoint("serve.model_load")  # tests: text queries answer while the model loads
            encoder = index.load_encoder(self.model)
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
        what loads lazily (kernels, torch's scorer), and choose the encoder's torch threads
        (models.tuning.query_threads). Run it on the thread that encodes queries (QueryBatcher's)."""
        failpoint("serve.warm_up")
        try:
            self.search([QueryRequest(queries=("warm up",), k=1)])
            if self.encoder is not None:
                self.query_threads = query_threads(self.encoder, [TUNING_QUERY])
        except LgptError:
            pass  # an empty index, a stale one: real requests will say so
        finally:
            score.kernel_policy.wait(KERNEL_WAIT_S)  # its load, begun beside the model's, ended: clients get the kernel
            self.warmed = True

    @property
    def ready(self) -> bool:
        return self.encoder is not None and self.failure is None

    def ready_modes(self, index: Searcher) -> list[Mode]:
        """The modes `index` answers now: text at once (it needs no model), visual and hybrid once the model is
        loaded, warmed up, and matches the generation."""
        answered = MODES if index.lexical is not None else ("visual",)
        return [mode for mode in answered if mode == "text" or (self.ready and self.warmed and not self.stale)]

    def require_ready(self) -> QueryEncoder:
        if self.failure is not None:
            raise NotReady(f"the model could not be loaded: {self.failure.message}")
        if self.encoder is None:
            raise NotReady("the model is still loading")
        if self.stale:
            raise NotReady(self.stale)
        return self.encoder

    # queries

    def search(self, requests: list[QueryRequest]) -> list[BatchAnswer | LgptError]:
        """Answer several requests with one forward pass for all their queries, and one scoring
        pass per distinct (filters, first pass). Every request sees the same generation."""
        encoder = self.require_ready()
        index = self.index()
        if self.stale:
            raise NotReady(self.stale)
        texts = [text for request in requests for text in request.queries]
        vectors = iter(encoder.encode_queries(texts))
        per_request = [[next(vectors) for _ in request.queries] for request in requests]
        return self.answer_encoded(index, requests, per_request, len(texts))

    def answer_encoded(self, index: Searcher, requests: list[QueryRequest], per_request: list[list],
                       batch_queries: int) -> list[BatchAnswer | LgptError]:
        """Requests whose queries are encoded (`per_request`): one stacked scoring pass per distinct
        (filters, first pass), split per request."""
        device = self.encoder.precision.device if self.encoder is not None else "cpu"
        answers: list[BatchAnswer | LgptError] = [BatchAnswer(index, [[] for _ in r.queries], batch_queries) for r in requests]
        groups: dict[tuple, list[int]] = {}
        for number, request in enumerate(requests):
            groups.setdefault((tuple(sorted(request.filters.items())), request.first_pass), []).append(number)
        for (filters, first_pass), members in groups.items():
            stacked = [v for number in members for v in per_request[number]]
            k = max(index.visual_depth(requests[number]) for number in members)
            hits = index.search_vectors(stacked, k, device, dict(filters) or None, first_pass)
            at = 0
            for number in members:
                request, answer = requests[number], answers[number]
                assert isinstance(answer, BatchAnswer)
                answer.results = index.finish(request, hits[at : at + len(request.queries)], per_request[number])
                answer.scored_with, answer.vectors = len(stacked), per_request[number]
                at += len(request.queries)
        return answers


def open_service(store, model: ModelSpec = ModelSpec(), scoring: DeviceScoring | None = None) -> IndexService:
    """A service on `store` (its model not loaded yet): a missing or damaged index fails here."""
    short_openmp_spin()
    service = IndexService(store, model)
    service.scoring = scoring or service.scoring
    if not service.store.exists():
        raise IndexProblem(f"no index at {service.store.location}.",
                           hint="Build one first: lgpt-index build DOCS, or serve --watch DOCS. Or say where one is: --index-dir DIR "
                                "or $LGPT_INDEX_DIR (and --name, --store); the command line looks for .lgpt-index in "
                                "this folder and its parents.")
    service.index()
    return service

