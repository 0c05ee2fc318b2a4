"""The "codes" artifact: each segment's packed binary codes, written beside its vectors by the
transaction core (a part per segment: index/artifacts.py) and read by the view's first pass.

A part is the segment's rows' codes, in row order, in blobs of at most BLOB_ROWS rows (a blob is read
whole and checked: size, sha256). Segments written before this artifact existed have no part; the
view scores their pages exactly (nothing is derived by a reader)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np

from ...core.types import PageRef
from ..artifacts import BlobSink, BlobSource, CommitContext, register
from ...core.errors import IndexProblem
from ..manifest import REBUILD_HINT, ArtifactRef, PartRef, Segment
from .pack import as_words, code_bytes, pack_codes

NAME = "codes"
VERSION = 1
EXT = "codes"
BLOB_ROWS = 1 << 22  # 4M rows (64 MiB of 128-dim codes; about 4,000 pages of 1,030 tokens) a blob at most


class CodesWriter:
    """Part writer: each page's codes packed as it is appended, sealed into blobs with the segment."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.chunks: list[np.ndarray] = []
        self.rows = 0

    def add(self, row: int, vectors: np.ndarray, page: PageRef | None, extra: Mapping[str, object]) -> None:
        codes = pack_codes(np.asarray(vectors))
        self.chunks.append(codes)
        self.rows += len(codes)

    def seal(self, sink: BlobSink) -> PartRef:
        width = code_bytes(self.dim)
        codes = np.concatenate(self.chunks) if self.chunks else np.zeros((0, width), dtype=np.uint8)
        blobs = [sink.put(codes[start : start + BLOB_ROWS].tobytes(), EXT) for start in range(0, max(len(codes), 1), BLOB_ROWS)]
        self.chunks = []
        return PartRef(version=VERSION, blobs=blobs, meta={"dim": self.dim, "rows": len(codes), "bytes_per_row": width,
                                                           "blob_rows": BLOB_ROWS})

    def discard(self) -> None:
        self.chunks = []


class StoredCodes:
    """A reader's codes of one generation: each segment's read (checked) on first use and kept."""

    def __init__(self, parts: Mapping[str, PartRef], source: BlobSource) -> None:
        self.parts = dict(parts)
        self.source = source
        self._words: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __contains__(self, segment_id: str) -> bool:
        return segment_id in self.parts

    def words(self, segment_id: str) -> np.ndarray:
        """(rows, words) uint64 codes of a segment (IndexProblem if a blob is damaged)."""
        with self._lock:
            if segment_id not in self._words:
                self._words[segment_id] = _read_part(self.parts[segment_id], self.source)
            return self._words[segment_id]


def _read_part(part: PartRef, source: BlobSource) -> np.ndarray:
    """The part's codes as (rows, words) uint64: one blob is used as read; several are copied into one
    array blob by blob (peak memory: the codes and one blob)."""
    width = part.meta["bytes_per_row"]
    rows = part.meta["rows"]
    if not isinstance(width, int) or width < 8 or width % 8 or not isinstance(rows, int):
        raise IndexProblem(f"codes part: {width!r} bytes a row, {rows!r} rows; the index is damaged.", hint=REBUILD_HINT)
    if len(part.blobs) == 1:  # mapped where the source can (file-backed, not heap: index/local/blobs.py)
        flat = np.frombuffer(getattr(source, "map", source.read)(part.blobs[0]), dtype=np.uint8)
    else:
        flat = np.empty(sum(blob.bytes for blob in part.blobs), dtype=np.uint8)
        at = 0
        for blob in part.blobs:
            data = source.read(blob)
            flat[at : at + len(data)] = np.frombuffer(data, dtype=np.uint8)
            at += len(data)
    if flat.size != rows * width:
        raise IndexProblem(f"codes part: {flat.size} bytes for {rows} rows of {width}; the index is damaged.", hint=REBUILD_HINT)
    return as_words(flat.reshape(rows, width))


class Codes:
    """The artifact: parts only (no per-generation build)."""

    name = NAME
    version = VERSION

    def part_writer(self, dim: int) -> CodesWriter:
        return CodesWriter(dim)

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        return None  # the core offers blobs, not a segment's vectors: old segments stay exact until rebuilt

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef | None:
        return None

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        meta = ref.meta
        numbers = [meta.get(key) for key in ("dim", "rows", "bytes_per_row", "blob_rows")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
            return [f"its entry lacks dim, rows, bytes_per_row or blob_rows ({sorted(meta)})"]
        dim, rows, width, per_blob = (int(n) for n in numbers)  # type: ignore[arg-type]  # ints: checked just above
        if width != code_bytes(dim) or per_blob < 1:
            return [f"{width} bytes a row does not fit {dim} dimensions"]
        expected = [min(per_blob, rows - start) * width for start in range(0, max(rows, 1), per_blob)]
        if [blob.bytes for blob in ref.blobs] != expected:
            return [f"its blobs hold {[b.bytes for b in ref.blobs]} bytes, {rows} rows of {width} bytes need {expected}"]
        return []

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> StoredCodes:
        return StoredCodes(parts, source)


CODES = register(Codes())
