"""The Qdrant segment writer: pages become points (PENDING until a commit shows them), in batches."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..manifest import (
    Segment,
)
from .ids import (
    PENDING,
    POOLED,
    UPSERT_BATCH,
    VECTOR,
    _models,
    path_fields,
    point_id,
)


class QdrantSegmentWriter:
    """Upserts pages as points in batches; `rows` records whose page each row is."""

    def __init__(self, txn: Any, dim: int) -> None:  # a QdrantTransaction (it imports this module)
        self.txn, self.dim = txn, dim
        self.id = f"seg-{uuid.uuid4().hex}"
        self.lengths: list[int] = []
        self.owners: list[str] = []
        self._batch: list = []

    @property
    def pages(self) -> int:
        return len(self.lengths)

    def append(self, vectors: np.ndarray, page: PageRef | None = None, extra: Mapping[str, object] | None = None,
               visible_from: int = PENDING) -> int:
        """One page's vectors as a point (`extra`: for the per-generation artifacts, none registered yet)."""
        if page is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        block = np.asarray(vectors, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self.dim or block.shape[0] < 1:
            raise ValueError(f"a page of shape {block.shape}, expected (tokens >= 1, {self.dim})")
        row = len(self.lengths)
        self._batch.append(make_point(self.txn, self.id, row, block, page, visible_from))
        self.lengths.append(int(block.shape[0]))
        self.owners.append(page.path)
        if len(self._batch) >= UPSERT_BATCH:
            self.flush()
        if row == 1:
            self.flush()
            failpoint("write-vectors")
        return row

    def flush(self) -> None:
        if self._batch:
            upsert(self.txn, self._batch)
            self._batch = []

    def segment(self) -> Segment:
        return Segment(id=self.id, pages=len(self.lengths), rows=sum(self.lengths), dim=self.dim, storage="qdrant")


def make_point(txn: Any, segment: str, row: int, block: np.ndarray, page: PageRef, visible_from: int):
    models = _models()
    pooled = block.mean(axis=0)
    pooled = pooled / (np.linalg.norm(pooled) or 1.0)
    payload = {**path_fields(page.path), "page": page.page, "sha256": page.sha256, "kind": page.kind,
               "metadata": dict(page.metadata), "segment": segment, "row": row,
               "gen_written": txn.generation + 1, "visible_from": visible_from, "writer": txn.token}
    return models.PointStruct(id=point_id(segment, row), vector={VECTOR: block, POOLED: pooled}, payload=payload)


def upsert(txn: Any, points: list) -> None:
    failpoint("upsert")
    txn.fence()
    txn._wrote = True
    with txn.writing():
        for attempt in range(4):
            try:
                txn.client.upsert(txn.physical, points, wait=True)
                break
            except Exception:
                if attempt == 3:
                    raise
                time.sleep(0.5 * 2 ** attempt)  # a transient error of a server: retried
