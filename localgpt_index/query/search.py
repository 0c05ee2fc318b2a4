"""Open an index and answer queries with the query encoder of the model it was built with.

The index view (index.view) with the query encoder of the model the index was built with (models),
encoded in one batch, scored with exact MaxSim, ranked."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import threading

import numpy as np

from ..core.errors import EnvironmentMissing, IndexProblem, MissingIndexFile
from ..core.types import Mode, SearchHit
from ..index.scoring.device import DeviceScorer, DeviceScoring
from ..index.local.store import LocalStore
from ..index.local.paths import index_path
from ..index.text.engine import LexicalIndex
from ..index.text.lexicon import QueryAnalysis
from ..index.format.manifest import Document, Manifest
from ..index.protocols import ExactScoring, Store, View
from ..models.protocols import QueryEncoder
from ..models.resolve import ModelRef, ModelSpec, fingerprint_in, resolve_model, resolve_recorded, same_model
from .copies import Copies
from .patches import no_visual_regions
from .regions import attach_regions
from .fusion import PagePrior
from .hybrid import Key, answer, choose_mode, load_prior, probe_questions, save_prior, visual_depth, visual_prior
from .request import QueryRequest, QuerySettings, validated

__all__ = ["DeviceScoring", "SearchHit", "Searcher", "load_query_encoder", "open_index"]
_UNSET: Any = object()


def as_request(request: QueryRequest | str | Sequence[str], **fields: Any) -> QueryRequest:
    """`Searcher.search`'s request: a QueryRequest, or the queries and the request's other fields as keywords."""
    if isinstance(request, QueryRequest):
        return request
    return validated(QueryRequest, "bad query", queries=[request] if isinstance(request, str) else list(request), **fields)


def load_query_encoder(ref: ModelRef, spec: ModelSpec = ModelSpec()) -> QueryEncoder:
    """The encoder for queries: a plugin family's own encoder, else the probe and the family's loader
    (on the spec's device and dtype)."""
    from ..models.families import family_named

    own = family_named(ref.family).encoder
    if own is not None:
        return own(ref, None)
    from ..models.loading import open_probed_encoder

    return open_probed_encoder(ref, spec, queries=True)


class Searcher:
    """One committed generation of an index (`view`, an index.protocols.View) with the query encoder of its
    model: it answers query requests (QueryRequest). What it reads of the generation is the view's."""

    def __init__(self, view: View, lexical: LexicalIndex | None = _UNSET, scoring: DeviceScoring | None = None) -> None:
        self.view = view
        self._encoder: QueryEncoder | None = None
        self._lexical = lexical
        self.scoring = scoring or DeviceScoring()
        self._device_scorer: DeviceScorer | None = None  # this generation's (its resident vectors), made on first use
        self._scored_on: DeviceScorer | None = None  # the device scorer of the last pass; None: the CPU scorer's
        self._copies_found: Copies | None = None
        self._prior: PagePrior[Key] | None = None  # the visual list's, learned on the first weighted hybrid query
        self._prior_lock = threading.Lock()

    @property
    def store(self) -> Store:
        return self.view.store

    @property
    def manifest(self) -> Manifest:
        return self.view.manifest

    @property
    def documents(self) -> list[Document]:
        return self.view.documents

    @property
    def page_count(self) -> int:
        return self.view.page_count

    def document(self, path: str) -> Document | None:
        return self.view.document(path)

    @property
    def lexical(self) -> LexicalIndex | None:
        """The generation's full-text index (the "lexical" artifact), which may hold no page (pictures with
        OCR off; an empty index: an empty one); None: the index reads no text (built before page text, or
        with --text never), so text and hybrid queries are refused."""
        if self._lexical is _UNSET:
            found = self.view.artifact("lexical")
            if isinstance(found, LexicalIndex):
                self._lexical = found
            else:
                self._lexical = LexicalIndex.create() if not self.view.documents else None
        return self._lexical

    def mode(self, settings: QuerySettings | None = None) -> Mode:
        """The mode a request with `settings` is answered in (hybrid by default when the index has text)."""
        return choose_mode(settings.mode if settings is not None else None, self.lexical, self.store.location)

    def load_encoder(self, spec: ModelSpec = ModelSpec()) -> QueryEncoder:
        """Load the model the index was built with (the revision it recorded), on the spec's device and dtype;
        another model (the spec's id) is refused."""
        recorded = self.manifest.model
        if spec.id is None or spec.id == recorded.id:
            ref = resolve_recorded(recorded.id, recorded.path, recorded.revision)
        else:
            ref = resolve_model(spec.id)
        if not same_model(ref, recorded.fingerprint, recorded.fingerprint_scheme):
            theirs = fingerprint_in(ref, recorded.fingerprint_scheme)
            raise IndexProblem(
                f"{self.store.location} was built with {recorded.id} ({recorded.fingerprint}), not {ref.id} ({theirs}); "
                "its vectors cannot be compared with another model's.",
                hint="Query without --model, or rebuild the index with the new model (build --rebuild --model ...).",
            )
        self._encoder = load_query_encoder(ref, spec)
        return self._encoder

    def use_encoder(self, encoder: QueryEncoder) -> None:
        """Answer with `encoder`, loaded for another generation of this index (serve, when it follows HEAD)."""
        self._encoder = encoder

    def search(self, request: QueryRequest | str | Sequence[str], **fields: Any) -> list[list[SearchHit]]:
        """Top-k pages for each query of `request` (all encoded in one batch): a QueryRequest, or the
        queries and the request's other fields as keywords (k, filters, first_pass, mode, fusion,
        with_text...). Text mode loads no model."""
        request = as_request(request, **fields)
        if self.mode(request) == "text":
            return self.search_encoded(request, None)
        encoder = self._encoder or self.load_encoder()
        return self.search_encoded(request, encoder.encode_queries(request.queries), encoder.precision.device)

    def search_encoded(self, request: QueryRequest, query_vectors: Sequence[np.ndarray] | None,
                       device: str = "cpu") -> list[list[SearchHit]]:
        """The answer to `request` whose queries are encoded already (None in text mode)."""
        mode = self.mode(request)
        visual = None
        if mode != "text":
            if query_vectors is None:
                raise ValueError(f"a {mode} query needs its query vectors")
            visual = self.search_vectors(query_vectors, self.visual_depth(request), device, request.filtered, request.first_pass)
        return self.finish(request, visual, query_vectors)

    def visual_depth(self, request: QueryRequest) -> int:
        """How many pages each query's visual list must hold for `request` (search_vectors' k)."""
        return visual_depth(self.mode(request), request.k, self._copies(request))

    def finish(self, request: QueryRequest, visual: Sequence[list[SearchHit]] | None,
               query_vectors: Sequence[np.ndarray] | None = None) -> list[list[SearchHit]]:
        """The top-k of each query from its visual list (search_vectors with visual_depth; None in
        text mode): the text list asked and fused here, copies collapsed, and regions found (visual ones
        from `query_vectors`), as `request` says."""
        mode = self.mode(request)
        prior = self.visual_prior() if mode == "hybrid" and request.fusion == "weighted" else None
        lexical = self.lexical
        analyses = [QueryAnalysis(lexical, query) for query in request.queries] if lexical is not None else None
        results = answer(self.view, lexical, request, visual, mode, analyses, self._copies(request), prior)
        return attach_regions(self.view, request, query_vectors, results, analyses)

    def visual_prior(self) -> PagePrior[Key] | None:
        """What the visual list gives each page whatever is asked (hybrid.visual_prior), learned once per
        generation with the loaded encoder; None before an encoder is loaded."""
        encoder, lexical = self._encoder, self.lexical
        if encoder is None or lexical is None:
            return None
        with self._prior_lock:
            if self._prior is None:
                cached = self._prior_path(encoder)
                self._prior = load_prior(cached)
                if self._prior is None:
                    self._prior = visual_prior(probe_questions(self.view, lexical), encoder.encode_queries,
                                               lambda vectors, k: self.search_vectors(vectors, k, encoder.precision.device))
                    if self._prior is not None:
                        save_prior(cached, self._prior)
        return self._prior

    def _prior_path(self, encoder: QueryEncoder) -> Path:
        """Where this generation's visual prior is kept between processes (a one-shot query pays the probes'
        encodings once per generation, model and precision, not once a process): the user's cache folder."""
        import hashlib

        import platformdirs

        manifest, precision = self.view.manifest, encoder.precision
        generation = f"{manifest.generation}|{manifest.created!r}|{sorted(manifest.segments)}|{manifest.model!r}"  # (its commit's)
        key = f"{generation}|{encoder.model.path}|{precision.device}|{precision.dtype}"
        key = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]  # (paths that are not UTF-8 too)
        return Path(platformdirs.user_cache_dir("lgpt-index")) / "visual-priors" / f"{key}.json"

    def _copies(self, request: QueryRequest) -> Copies | None:
        """This generation's byte-identical documents, to collapse (None: `all_copies` lists them apart)."""
        if request.all_copies:
            return None
        if self._copies_found is None:
            self._copies_found = Copies(self.view.documents)
        return self._copies_found

    def search_vectors(self, query_vectors: Sequence[np.ndarray], k: int, device: str = "cpu",
                       filters: dict[str, str] | None = None, first_pass: int | str | None = None) -> list[list[SearchHit]]:
        """The view's ranking of already-encoded queries (View.search_vectors), scored exactly on
        the device `self.scoring` picks for `device` (the model's): the CPU scorer, or the device scorer."""
        self._choose_scorer(device)
        return self.view.search_vectors(query_vectors, k, device=device, filters=filters, first_pass=first_pass)

    def prepare_scoring(self, device: str) -> ExactScoring | None:
        """The view's exact scoring with the scorer for `device` chosen (serve's sweep scores its parts
        itself); None: the store ranks the pages (Qdrant)."""
        return self._choose_scorer(device)

    def _choose_scorer(self, device: str) -> ExactScoring | None:
        """Where exact scoring runs: this generation's device scorer when `self.scoring` puts scoring on a
        device (DeviceScoring.device_for), else the CPU scorer; handed to the view's exact scoring."""
        exact = self.view.exact_scoring()
        if exact is None:  # a store that ranks by itself (Qdrant)
            return None
        on = self.scoring.device_for(device)
        if on is not None and (self._device_scorer is None or self._device_scorer.requested != on):
            try:
                self._device_scorer = DeviceScorer(on, self.scoring.max_resident)
            except ImportError:
                raise EnvironmentMissing(f"the device scorer (on {on}) needs torch, which cannot be imported here.",
                                         hint="Install lgpt-index with its dependencies, or score on the CPU: --scorer cpu.") from None
        self._scored_on = self._device_scorer if on is not None else None
        exact.use_scorer(self._scored_on)
        if self._scored_on is not None:
            self._scored_on.stats.begin()
        return exact

    def no_visual_regions(self) -> str | None:
        """Why this index's hits have no visual regions whatever is asked (None: they may have some)."""
        return no_visual_regions(self.view)

    def device_scoring(self) -> dict[str, Any] | None:
        """What the device scorer did for the last query (query --json "scoring"."device"); None: the CPU scorer answered."""
        return self._scored_on.stats.to_json() if self._scored_on is not None else None

    def release_device(self) -> None:
        """Drop this generation's resident vectors now (serve, when it moves to a new generation)."""
        if self._device_scorer is not None:
            self._device_scorer.release()


def open_index(index_dir: str | Path | None = None, name: str | None = None, store=None,
               scoring: DeviceScoring | None = None) -> Searcher:
    """Open the current generation of an index (default ./.lgpt-index/default), or of `store`.

    The manifest is validated and each segment's files are checked (sizes, header, offsets) here;
    no vectors are read: each block is checked against its hash when a search first reads it.
    """
    store = store if store is not None else LocalStore(index_path(index_dir, name))
    for attempt in range(3):
        try:
            return Searcher(store.open_view(), scoring=scoring)
        except MissingIndexFile:
            if attempt == 2:
                raise
            store = store.reopened()  # a writer committed and collected meanwhile: follow the new HEAD
    raise AssertionError("unreachable")
