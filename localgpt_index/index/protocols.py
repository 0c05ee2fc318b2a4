"""The index's seams, as typing.Protocol: what a store and a view of one generation offer.

Whichever backend (local folder, Qdrant) holds the index.

What a view can do besides answering search_vectors is declared, never sniffed: `exact_scoring()`
(this generation's pages scored here, part by part, on the CPU or a device scorer: ExactScoring) and
`text_search()` (the store's own text lists) answer None where the backend does not.

Callers (build, remove, import/export, query, serve) are typed against these, never against a
backend's class; `index/conformance.py` checks, with the type checker, that both backends fit.
Value types live in `core/types.py` (PageRef, SearchHit) and `index/format/manifest.py` (the manifest).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..core.types import PageRef, SearchHit
from .format.manifest import Document, Manifest

if TYPE_CHECKING:
    from .artifacts import BlobSource
    from .scoring.chunks import Queries
    from .scoring.device import DeviceScorer
    from .text.engine import TextHit
    from .transaction import Transaction
    from .scoring.codes.plan import ScoringPath  # not at run time: codes/ imports the scorer
    from .view import ExactUnit, PageTable

__all__ = ["ExactScoring", "PageRef", "SearchHit", "Store", "View"]


class ExactScoring(Protocol):
    """Exact MaxSim over a generation's pages, one part at a time (a local view): what a search pass and
    serve's sweep go through, on the CPU scorer or the device scorer the caller hands it."""

    def use_scorer(self, scorer: DeviceScorer | None) -> None:
        """Score exact parts with `scorer` (a device scorer); None: the CPU scorer."""
        ...

    def exact_units(self, table: PageTable | None = None) -> list[ExactUnit]: ...

    def parts_in_flight(self, device: str = "cpu") -> int: ...

    def start_unit(self, query_vectors: Queries, unit: ExactUnit, device: str = "cpu") -> Future: ...

    def all_pages(self) -> PageTable: ...

    def rank_scores(self, scores: np.ndarray, docs: list[Document], k: int, table: PageTable) -> list[list[SearchHit]]: ...


class View(Protocol):
    """One committed generation, opened and checked; it never writes and never loads a model."""

    manifest: Manifest

    @property
    def store(self) -> Store: ...

    @property
    def documents(self) -> list[Document]: ...

    @property
    def page_count(self) -> int: ...

    def document(self, path: str) -> Document | None: ...

    def page_vectors(self, doc: Document) -> list[np.ndarray]: ...

    def search_vectors(self, query_vectors: Sequence[np.ndarray], k: int, device: str = "cpu",
                       filters: dict[str, str] | None = None,
                       first_pass: int | str | None = None) -> list[list[SearchHit]]: ...

    def scoring_path(self, first_pass: int | str | None) -> ScoringPath:
        """Which path answers a request with `first_pass` (exact, first-pass, or "store": the store ranks)."""
        ...

    def artifact(self, name: str) -> object | None:
        """A derived artifact of this generation, opened lazily; None: absent (the caller falls back)."""
        ...

    def blobs(self) -> BlobSource:
        """Where this generation's artifact blobs are read from, checked."""
        ...

    def exact_scoring(self) -> ExactScoring | None:
        """This generation's exact scoring, where its pages are scored here; None: the store ranks them (Qdrant)."""
        ...

    def text_search(self, texts: list[str], k: int, filters: dict[str, str] | None = None) -> list[list[TextHit]] | None:
        """The lexical top-k of each query from the store itself; None: from the generation's text artifact."""
        ...


class Store(Protocol):
    """Where an index lives, and the one way to change it (`begin`)."""

    @property
    def location(self) -> str: ...

    @property
    def local_folders(self) -> tuple[Path, ...]: ...

    def exists(self) -> bool: ...

    def head_key(self) -> tuple: ...

    def read_manifest(self) -> Manifest | None: ...

    def open(self) -> Manifest: ...

    def open_view(self) -> View: ...

    def reopened(self) -> Store: ...

    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> AbstractContextManager[Transaction]: ...

    def verify(self) -> list[str]: ...

    def verify_notes(self) -> list[str]:
        """What verify saw that is not damage (Qdrant: records of a shared PDF store's gone collections)."""
        ...

    def pdf_file(self, rel: str) -> Path: ...

    def size_bytes(self, manifest: Manifest) -> int: ...

    def writable(self) -> Store:
        """This store, allowed to create what a writer needs (a local store always is)."""
        ...

    def close(self) -> None: ...
