"""The Qdrant segment writer: pages become points (PENDING until a commit shows them), in batches."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..manifest import (
    Segment,
)
from .ids import (
    PENDING,
    UPSERT_BATCH,
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

    def append(self, vectors: np.ndarray, page: PageRef | None = None, visible_from: int = PENDING) -> int:
        if page is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        block = np.asarray(vectors, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self.dim or block.shape[0] < 1:
            raise ValueError(f"a page of shape {block.shape}, expected (tokens >= 1, {self.dim})")
        row = len(self.lengths)
        self._batch.append(self.txn.point(self.id, row, block, page, visible_from))
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
            self.txn.upsert(self._batch)
            self._batch = []

    def segment(self) -> Segment:
        return Segment(id=self.id, pages=len(self.lengths), rows=sum(self.lengths), dim=self.dim, storage="qdrant")
