"""The index's seams, as typing.Protocol: what a store, its transactions, their segment writers
and a view of one generation offer, whichever backend (local folder, Qdrant) holds the index.

Callers (build, remove, import/export, query, serve) are typed against these, never against a
backend's class; `index/conformance.py` checks, with the type checker, that both backends fit.
Value types live in `core/types.py` (PageRef, SearchHit) and `index/format/manifest.py` (the manifest).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..core.types import PageRef, SearchHit
from .format.manifest import Document, Manifest

if TYPE_CHECKING:
    from .txn.core import Transaction
    from .scoring.codes.plan import ScoringPath  # not at run time: codes/ imports the scorer

__all__ = ["PageRef", "SearchHit", "Store", "View"]


class View(Protocol):
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
                       first_pass: int | str | None = None) -> list[list[SearchHit]]: ...

    def scoring_path(self, first_pass: int | str | None) -> ScoringPath:
        """Which path answers a request with `first_pass` (exact, first-pass, or "store": the store ranks)."""
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

    def open_view(self) -> View: ...

    def reopened(self) -> Store: ...

    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> AbstractContextManager[Transaction]: ...

    def verify(self) -> list[str]: ...

    def pdf_file(self, rel: str) -> Path: ...

    def size_bytes(self, manifest: Manifest) -> int: ...

    def writable(self) -> Store:
        """This store, allowed to create what a writer needs (a local store always is)."""
        ...

    def close(self) -> None: ...
