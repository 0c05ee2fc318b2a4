"""The segment writer callers get from either store (`SegmentWriter`), and what a backend supplies
underneath it (`SegmentSink`): validation, the row count and the "write-vectors" failpoint live
here once; how the rows are kept (a file on disk, points in Qdrant) lives in the sink."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..format.manifest import Segment

if TYPE_CHECKING:
    from ..artifacts import PartWriter

NO_PAGE = "a Qdrant store needs to know whose page each vector block is"


class SegmentSink(Protocol):
    """The backend half of a segment writer."""

    def write(self, row: int, block: np.ndarray, page: PageRef | None) -> None: ...

    def flush(self) -> None:
        """Make what was written so far reach its storage (called after row 1, before "write-vectors")."""
        ...

    def seal(self, lengths: list[int], dim: int) -> Segment: ...

    def discard(self) -> None:
        """Let go of what was written (local: the temporary files; Qdrant: nothing, discard's filter does it)."""
        ...


class SegmentWriter:
    """Pages of one segment, appended as they are encoded; sealed by `finish_segment`.

    `dtype`: what the backend stores (float16 on disk, float32 for Qdrant's client); `needs_page`:
    the backend records whose page each row is (Qdrant), so `page` may not be None. Registered
    artifacts' part writers (`parts`) are fed every page beside the vectors; `extra` is what else
    the caller knows of the page (a mapping, e.g. {"text": ...}), passed to them as is."""

    def __init__(self, sink: SegmentSink, dim: int, dtype: type = np.float16, needs_page: bool = False,
                 parts: Mapping[str, PartWriter] | None = None) -> None:
        self.sink, self.dim, self.dtype, self.needs_page = sink, dim, dtype, needs_page
        self.lengths: list[int] = []
        self.parts: dict[str, PartWriter] = dict(parts or {})

    @property
    def pages(self) -> int:
        return len(self.lengths)

    def append(self, vectors: np.ndarray, page: PageRef | None = None, extra: Mapping[str, object] | None = None) -> int:
        """One page's (tokens, dim) vectors; returns its row in the segment."""
        if page is None and self.needs_page:
            raise ValueError(NO_PAGE)
        block: np.ndarray = np.ascontiguousarray(vectors, dtype=self.dtype)
        if block.ndim != 2 or block.shape[1] != self.dim or block.shape[0] < 1:
            raise ValueError(f"a page of shape {block.shape}, expected (tokens >= 1, {self.dim})")
        row = len(self.lengths)
        self.sink.write(row, block, page)
        self.lengths.append(int(block.shape[0]))
        for part in self.parts.values():
            part.add(row, block, page, extra or {})
        if row == 1:
            self.sink.flush()
            failpoint("write-vectors")
        return row

    def seal(self) -> Segment:
        return self.sink.seal(self.lengths, self.dim)

    def discard(self) -> None:
        self.sink.discard()
        for part in self.parts.values():
            part.discard()
