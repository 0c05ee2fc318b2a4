"""The index's seams, as typing.Protocol: what a store, its transactions, their segment writers
and a view of one generation offer, whichever backend (local folder, Qdrant) holds the index.

Callers (build, remove, import/export, query, serve) are typed against these, never against a
backend's class; `index/conformance.py` checks, with the type checker, that both backends fit.
Value types live in `core/types.py` (PageRef, SearchHit) and `index/format/manifest.py` (the manifest).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..core.types import PageRef, SearchHit
from .format.manifest import Document, Failure, Manifest, ModelInfo, Segment, Settings

if TYPE_CHECKING:
    from .scoring.codes.plan import ScoringPath  # not at run time: codes/ imports the scorer

__all__ = ["IndexView", "PageRef", "SearchHit", "SegmentWriter", "Store", "Transaction"]


class SegmentWriter(Protocol):
    """Pages of one segment, appended as they are encoded; sealed by `Transaction.finish_segment`."""

    @property
    def pages(self) -> int: ...

    def append(self, vectors: np.ndarray, page: PageRef | None = None, extra: Mapping[str, object] | None = None) -> int:
        """One page's (tokens, dim) vectors; returns its row in the segment. `extra`: what else the
        caller knows of the page ({"text": ...}), for the registered artifacts' part writers."""
        ...


W = TypeVar("W", bound=SegmentWriter)


class Transaction(Protocol[W]):
    """One writer's changes: staged segments and PDFs, then commits that each publish a generation.
    `W`: the backend's segment writer (`finish_segment` takes only those its own `segment_writer` made)."""

    generation: int
    current: Manifest | None
    needs_upgrade: bool

    def segment_writer(self, dim: int, without: Collection[str] = ()) -> W:
        """A writer of a new segment, feeding every registered artifact's part but those named in
        `without` (a build with --text never writes no "text" part: its pages have no text)."""
        ...

    def finish_segment(self, writer: W) -> Segment | None: ...

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment: ...

    def store_pdf(self, pdf: Path) -> tuple[str, str] | None:
        """Keep a converted PDF by its content: (its name in the store, its sha256); None: no PDF store."""
        ...

    def pdf_path(self, rel: str) -> Path: ...

    def commit(self, documents: Sequence[Document], model: ModelInfo, settings: Settings,
               failures: Sequence[Failure] = (), in_progress: Sequence[Document] = ()) -> Manifest: ...


class IndexView(Protocol):
    """One committed generation, opened and checked; it never writes and never loads a model."""

    manifest: Manifest

    @property
    def documents(self) -> list[Document]: ...

    @property
    def page_count(self) -> int: ...

    def document(self, path: str) -> Document | None: ...

    def page_vectors(self, doc: Document) -> list[np.ndarray]: ...

    def search_vectors(self, query_vectors: Sequence[np.ndarray], k: int, device: str = "cpu",
                       filters: dict[str, str] | None = None,
                       candidates: int | None = None) -> list[list[SearchHit]]: ...

    def scoring_path(self, candidates: int | str | None) -> ScoringPath:
        """Which path answers a request for `candidates` (exact, first-pass, or "store": the store ranks)."""
        ...

    def artifact(self, name: str) -> object | None:
        """A derived artifact of this generation, opened lazily; None: absent (the caller falls back)."""
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

    def open_view(self) -> IndexView: ...

    def reopened(self) -> Store: ...

    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> AbstractContextManager[Transaction[Any]]: ...

    def verify(self) -> list[str]: ...

    def pdf_file(self, rel: str) -> Path: ...

    def size_bytes(self, manifest: Manifest) -> int: ...

    def writable(self) -> Store:
        """This store, allowed to create what a writer needs (a local store always is)."""
        ...

    def close(self) -> None: ...
