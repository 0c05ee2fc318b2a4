"""The "codes" artifact: each segment's packed binary codes, written beside its vectors by the
transaction core (a part per segment: index/artifacts.py) and read by the view's first pass.

A part (version 2) is the segment's rows' residual codes (pack.py), in row order, in blobs of at most
BLOB_ROWS rows, then each row's centroid id (one byte) in blobs of the same rows, then the segment's
codebook (centroids and sigma, float32) in one blob; a blob is read whole and checked (size, sha256).
Segments written before this artifact existed have no part, and version 1 parts (plain sign codes,
whose estimates are not comparable with version 2's) count as none: the view scores those pages
exactly, with a hint naming `lgpt-index upgrade` (nothing is derived by a reader)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...core.types import PageRef
from ..artifacts import BlobSink, BlobSource, CommitContext, register
from ...core.errors import IndexProblem
from ..manifest import REBUILD_HINT, ArtifactRef, BlobRef, PartRef, Segment
from .pack import TRAIN_ROWS, Codebook, as_words, code_bytes, residual_codes, train_codebook

NAME = "codes"
VERSION = 2  # 1: plain sign codes (read as absent); 2: residual codes with a per-segment codebook
EXT = "codes"
BLOB_ROWS = 1 << 22  # 4M rows (64 MiB of 128-dim codes; about 4,000 pages of 1,030 tokens) a blob at most


class CodesWriter:
    """Part writer: the segment's first TRAIN_ROWS rows are kept (float16) until its codebook is learned
    from them, then every page is coded as it is appended; sealed into blobs with the segment."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.centroids: np.ndarray | None = None
        self.codes: list[np.ndarray] = []
        self.ids: list[np.ndarray] = []
        self.abs_sum = np.zeros(dim, dtype=np.float64)
        self.rows = 0

    def add(self, row: int, vectors: np.ndarray, page: PageRef | None, extra: Mapping[str, object]) -> None:
        if self.centroids is None:
            self.pending.append(np.asarray(vectors, dtype=np.float16))
            self.pending_rows += len(vectors)
            if self.pending_rows >= TRAIN_ROWS:
                self._learn()
        else:
            self._code(np.asarray(vectors))

    def _learn(self) -> None:
        sample = np.concatenate(self.pending) if self.pending else np.zeros((0, self.dim), dtype=np.float16)
        self.centroids = train_codebook(sample)
        self.pending, self.pending_rows = [], 0
        self._code(sample)

    def _code(self, vectors: np.ndarray) -> None:
        assert self.centroids is not None
        codes, ids, abs_sum = residual_codes(vectors, self.centroids)
        self.codes.append(codes)
        self.ids.append(ids)
        self.abs_sum += abs_sum
        self.rows += len(codes)

    def seal(self, sink: BlobSink) -> PartRef:
        if self.centroids is None:
            self._learn()
        assert self.centroids is not None
        width = code_bytes(self.dim)
        codes = np.concatenate(self.codes) if self.codes else np.zeros((0, width), dtype=np.uint8)
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, dtype=np.uint8)
        book = Codebook(self.centroids, (self.abs_sum / max(len(codes), 1)).astype(np.float32))
        spans = range(0, max(len(codes), 1), BLOB_ROWS)
        blobs = [sink.put(codes[start : start + BLOB_ROWS].tobytes(), EXT) for start in spans]
        blobs += [sink.put(ids[start : start + BLOB_ROWS].tobytes(), EXT) for start in spans]
        blobs.append(sink.put(book.to_bytes(), EXT))
        self.codes, self.ids = [], []
        return PartRef(version=VERSION, blobs=blobs, meta={"dim": self.dim, "rows": len(codes), "bytes_per_row": width,
                                                           "blob_rows": BLOB_ROWS, "centroids": len(self.centroids)})

    def discard(self) -> None:
        self.pending, self.codes, self.ids = [], [], []


@dataclass(frozen=True)
class PartCodes:
    """One segment's stored codes: words (rows, words) uint64, ids (rows,) uint8 and its codebook."""

    words: np.ndarray
    ids: np.ndarray
    codebook: Codebook


class StoredCodes:
    """A reader's codes of one generation: each segment's read (checked) on first use and kept. Only
    current (version 2) parts count; `stale` names the segments whose parts are older."""

    def __init__(self, parts: Mapping[str, PartRef], source: BlobSource) -> None:
        self.parts = {sid: part for sid, part in parts.items() if part.version == VERSION}
        self.stale = {sid for sid, part in parts.items() if part.version != VERSION}
        self.source = source
        self._read: dict[str, PartCodes] = {}
        self._lock = threading.Lock()

    def __contains__(self, segment_id: str) -> bool:
        return segment_id in self.parts

    def segment(self, segment_id: str) -> PartCodes:
        """A segment's codes (IndexProblem if a blob is damaged)."""
        with self._lock:
            if segment_id not in self._read:
                self._read[segment_id] = _read_part(self.parts[segment_id], self.source)
            return self._read[segment_id]

    def words(self, segment_id: str) -> np.ndarray:
        return self.segment(segment_id).words


def _read_part(part: PartRef, source: BlobSource) -> PartCodes:
    """The part's codes, ids and codebook. One blob of codes is used as read; several are copied into one
    array blob by blob (peak memory: the codes and one blob)."""
    width, rows, dim = part.meta.get("bytes_per_row"), part.meta.get("rows"), part.meta.get("dim")
    if not isinstance(width, int) or width < 8 or width % 8 or not isinstance(rows, int) or not isinstance(dim, int):
        raise IndexProblem(f"codes part: {width!r} bytes a row, {rows!r} rows; the index is damaged.", hint=REBUILD_HINT)
    count = (len(part.blobs) - 1) // 2
    codes = _joined(part.blobs[:count], source)
    ids = _joined(part.blobs[count : 2 * count], source)
    if codes.size != rows * width or ids.size != rows:
        raise IndexProblem(f"codes part: {codes.size} bytes for {rows} rows of {width}; the index is damaged.", hint=REBUILD_HINT)
    book = Codebook.from_bytes(source.read(part.blobs[-1]), dim)
    if len(book.centroids) < 1 + int(ids.max(initial=0)):
        raise IndexProblem(f"codes part: a centroid id past its {len(book.centroids)} centroids; the index is damaged.",
                           hint=REBUILD_HINT)
    return PartCodes(as_words(codes.reshape(rows, width)), ids, book)


def _joined(blobs: list[BlobRef], source: BlobSource) -> np.ndarray:
    if len(blobs) == 1:  # mapped where the source can (file-backed, not heap: index/local/blobs.py)
        return np.frombuffer(getattr(source, "map", source.read)(blobs[0]), dtype=np.uint8)
    flat = np.empty(sum(blob.bytes for blob in blobs), dtype=np.uint8)
    at = 0
    for blob in blobs:
        data = source.read(blob)
        flat[at : at + len(data)] = np.frombuffer(data, dtype=np.uint8)
        at += len(data)
    return flat


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
        if ref.version > VERSION:
            return []  # a newer lgpt-index's codes: their blobs' hashes are checked; readers here treat them as absent
        meta = ref.meta
        numbers = [meta.get(key) for key in ("dim", "rows", "bytes_per_row", "blob_rows")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
            return [f"its entry lacks dim, rows, bytes_per_row or blob_rows ({sorted(meta)})"]
        dim, rows, width, per_blob = (int(n) for n in numbers)  # type: ignore[arg-type]  # ints: checked just above
        if width != code_bytes(dim) or per_blob < 1:
            return [f"{width} bytes a row does not fit {dim} dimensions"]
        spans = [min(per_blob, rows - start) for start in range(0, max(rows, 1), per_blob)]
        expected = [n * width for n in spans]
        if ref.version >= 2:
            centroids = meta.get("centroids")
            if not isinstance(centroids, int) or isinstance(centroids, bool) or not 1 <= centroids <= 256:
                return [f"its entry names {centroids!r} centroids (1 to 256)"]
            expected += spans + [(centroids + 1) * dim * 4]
        if [blob.bytes for blob in ref.blobs] != expected:
            return [f"its blobs hold {[b.bytes for b in ref.blobs]} bytes, {rows} rows of {width} bytes need {expected}"]
        return []

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> StoredCodes:
        return StoredCodes(parts, source)


CODES = register(Codes())
