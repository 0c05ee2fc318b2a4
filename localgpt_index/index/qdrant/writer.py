"""The Qdrant segment sink: pages become points (PENDING until a commit shows them), in batches.

`QdrantWriting` is what it (and the sparse vectors, sparse.py) needs of the transaction's backend
(txn.py's QdrantWriting, which imports both).
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..artifacts import BlobSource
from ..format.manifest import Segment
from .ids import (
    PENDING,
    POOLED,
    UPSERT_BATCH,
    VECTOR,
    _models,
    path_fields,
    point_id,
)


class QdrantWriting(Protocol):
    """A Qdrant transaction's backend, as its point writers see it."""

    store: Any  # the QdrantStore
    physical: str  # the collection being written

    @property
    def client(self) -> Any: ...

    @property
    def token(self) -> str: ...

    @property
    def generation(self) -> int: ...

    def fence(self) -> None: ...

    def writing(self) -> AbstractContextManager[None]: ...

    def mark_written(self) -> None: ...

    def record_owners(self, segment: str, paths: list[str]) -> None:
        """Whose page each row of a sealed segment is (a commit copies pages stored under another path)."""
        ...

    def base_blobs(self) -> BlobSource: ...


class PointSink:
    """Pages become points of the collection being written, upserted in batches; `owners` records
    whose page each row is (a commit copies pages stored under another path)."""

    def __init__(self, txn: QdrantWriting, dim: int) -> None:
        self.txn, self.dim = txn, dim
        self.id = f"seg-{uuid.uuid4().hex}"
        self.owners: list[str] = []
        self._batch: list = []

    def write(self, row: int, block: np.ndarray, page: PageRef | None) -> None:
        assert page is not None  # the SegmentWriter refuses a page without a PageRef (needs_page)
        self._batch.append(make_point(self.txn, self.id, row, block, page, PENDING))
        self.owners.append(page.path)
        if len(self._batch) >= UPSERT_BATCH:
            self.flush()

    def flush(self) -> None:
        if self._batch:
            upsert(self.txn, self._batch)
            self._batch = []

    def seal(self, lengths: list[int], dim: int) -> Segment:
        self.flush()
        self.txn.record_owners(self.id, list(self.owners))
        return Segment(id=self.id, pages=len(lengths), rows=sum(lengths), dim=self.dim, storage="qdrant")

    def discard(self) -> None:
        """Nothing here: the transaction's discard deletes the points this writer upserted."""


def make_point(txn: QdrantWriting, segment: str, row: int, block: np.ndarray, page: PageRef, visible_from: int):
    models = _models()
    pooled = block.mean(axis=0)
    pooled = pooled / (np.linalg.norm(pooled) or 1.0)
    payload = {**path_fields(page.path), "page": page.page, "sha256": page.sha256, "kind": page.kind,
               "metadata": dict(page.metadata), "segment": segment, "row": row,
               "gen_written": txn.generation + 1, "visible_from": visible_from, "writer": txn.token}
    return models.PointStruct(id=point_id(segment, row), vector={VECTOR: block, POOLED: pooled}, payload=payload)


def upsert(txn: QdrantWriting, points: list) -> None:
    failpoint("upsert")
    txn.fence()
    txn.mark_written()
    with txn.writing():
        for attempt in range(4):
            try:
                txn.client.upsert(txn.physical, points, wait=True)
                break
            except Exception:
                if attempt == 3:
                    raise
                time.sleep(0.5 * 2 ** attempt)  # a transient error of a server: retried
