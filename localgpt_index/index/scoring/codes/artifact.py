"""The "codes" artifact: each segment's packed binary codes, beside its vectors.

Written by the transaction (a part per segment: index/artifacts.py) and read by the view's first pass.

A part (version 2) is the segment's rows' residual codes (pack.py), in row order, in blobs of at most
BLOB_ROWS rows, then each row's centroid id (one byte) in blobs of the same rows, then the segment's
codebook (centroids and sigma, float32) in one blob; a blob is read whole and checked (size, sha256).
Segments written before this artifact existed have no part, and version 1 parts (plain sign codes,
whose estimates are not comparable with version 2's) count as none: the view scores those pages
exactly, with a hint naming `lgpt-index upgrade` (nothing is derived by a reader).

Version 3 adds one blob: the XXH3 hash of every CHECK_BLOCK (64 KiB) block of each codes and ids blob,
in blob order. A reader then maps the codes without reading them and checks each block when the first
pass is about to score rows in it (index/format/checksums.BlockGuard, as the vectors), so a process's first
query streams through the codes once instead of reading and hashing them whole before scoring. Version
2 parts (the same codes, no hashes) are still read, each blob checked whole (sha256) on first use;
`lgpt-index upgrade` adds their hashes (with_block_hashes: the codes are not computed again)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ....core.types import PageRef
from ...artifacts import Artifact, BlobSink, BlobSource, CommitContext
from ....core.errors import IndexProblem
from ....core.plugins import hookimpl
from ...format.checksums import BlockGuard
from ...format.manifest import CHECK_BLOCK, REBUILD_HINT, ArtifactRef, BlobRef, Checksum, PartRef, Segment
from .pack import TRAIN_ROWS, Codebook, as_words, code_bytes, residual_codes, train_codebook

NAME = "codes"
VERSION = 3  # 1: plain sign codes (read as absent); 2: residual codes with a per-segment codebook; 3: 2 and block hashes
READABLE = (2, 3)  # versions a reader scores with (the same codes; 3 checked block by block)
HASHED = 3  # from this version on, the last blob holds the block hashes
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
            self.pending.append(np.array(vectors, dtype=np.float16))  # a copy: the page's own array is not kept alive
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
        hashes = [block_hashes(codes[start : start + BLOB_ROWS]) for start in spans]
        hashes += [block_hashes(ids[start : start + BLOB_ROWS]) for start in spans]
        blobs.append(sink.put(np.concatenate(hashes).astype("<u8").tobytes(), EXT))
        self.codes, self.ids = [], []
        return PartRef(version=VERSION, blobs=blobs, meta={"dim": self.dim, "rows": len(codes), "bytes_per_row": width,
                                                           "blob_rows": BLOB_ROWS, "centroids": len(self.centroids),
                                                           "check_block": CHECK_BLOCK})

    def discard(self) -> None:
        self.pending, self.codes, self.ids = [], [], []


def block_hashes(data: np.ndarray, block: int = CHECK_BLOCK) -> np.ndarray:
    """XXH3 of every `block` bytes of an array's bytes (one for an empty one), as uint64."""
    import xxhash

    raw = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # an ndarray is a buffer; numpy's stubs lack it
    return np.array([xxhash.xxh3_64_intdigest(raw[at : at + block]) for at in range(0, max(len(raw), 1), block)], dtype=np.uint64)


def with_block_hashes(part: PartRef, source: BlobSource, sink: BlobSink) -> PartRef:
    """A version 2 part as version 3: the same blobs (each read and checked whole) and their block hashes."""
    count = (len(part.blobs) - 1) // 2
    hashes = [block_hashes(np.frombuffer(source.read(blob), dtype=np.uint8)) for blob in part.blobs[: 2 * count]]
    blob = sink.put(np.concatenate(hashes).astype("<u8").tobytes(), EXT)
    return PartRef(version=VERSION, blobs=[*part.blobs, blob], meta={**part.meta, "check_block": CHECK_BLOCK})


@dataclass(frozen=True)
class PartCodes:
    """One segment's stored codes: words (rows, words) uint64, ids (rows,) uint8 and its codebook, and
    `check_rows(lo, hi)`, called before rows lo..hi-1 are scored (IndexProblem if a block holding them
    is damaged; nothing to do where the codes were checked whole when read)."""

    words: np.ndarray
    ids: np.ndarray
    codebook: Codebook
    check_rows: Callable[[int, int], None] = field(default=lambda lo, hi: None)


class StoredCodes:
    """A reader's codes of one generation: each segment's read (checked) on first use and kept. Only
    readable parts count (versions 2 and 3: the same codes); `stale` names the segments whose parts are not."""

    def __init__(self, parts: Mapping[str, PartRef], source: BlobSource) -> None:
        self.parts = {sid: part for sid, part in parts.items() if part.version in READABLE}
        self.stale = {sid for sid, part in parts.items() if part.version not in READABLE}
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
    count = (len(part.blobs) - (2 if part.version >= HASHED else 1)) // 2
    lazy = _lazy(part, count, source)
    if lazy is not None:
        return _checked_part(lazy[0].raw, lazy[1].raw, part, source, lazy)
    return _checked_part(_joined(part.blobs[:count], source), _joined(part.blobs[count : 2 * count], source), part, source)


def _checked_part(codes: np.ndarray, ids: np.ndarray, part: PartRef, source: BlobSource,
                  guards: tuple[BlockGuard, BlockGuard] | None = None) -> PartCodes:
    width, rows, dim = part.meta["bytes_per_row"], part.meta["rows"], part.meta["dim"]
    assert isinstance(width, int) and isinstance(rows, int) and isinstance(dim, int)
    if codes.size != rows * width or ids.size != rows:
        raise IndexProblem(f"codes part: {codes.size} bytes for {rows} rows of {width}; the index is damaged.", hint=REBUILD_HINT)
    count = (len(part.blobs) - (2 if part.version >= HASHED else 1)) // 2
    book = Codebook.from_bytes(source.read(part.blobs[2 * count]), dim)
    if guards is None:
        if len(book.centroids) < 1 + int(ids.max(initial=0)):
            raise IndexProblem(f"codes part: a centroid id past its {len(book.centroids)} centroids; the index is damaged.",
                               hint=REBUILD_HINT)
        return PartCodes(as_words(codes.reshape(rows, width)), ids, book)
    words_guard, ids_guard = guards
    centroids = len(book.centroids)

    def check_rows(lo: int, hi: int) -> None:
        words_guard.check_bytes(lo * width, hi * width)
        ids_guard.check_bytes(lo, hi)
        if centroids < 256 and hi > lo and int(ids[lo:hi].max()) >= centroids:
            raise IndexProblem(f"codes part: a centroid id past its {centroids} centroids; the index is damaged.", hint=REBUILD_HINT)

    return PartCodes(as_words(codes.reshape(rows, width)), ids, book, check_rows)


def _lazy(part: PartRef, count: int, source: BlobSource) -> tuple[BlockGuard, BlockGuard] | None:
    """Guards over the one codes blob and the one ids blob of a version 3 part, where the source maps blobs
    (a local index) and each is one blob; None otherwise (the blobs are then read and checked whole)."""
    guarded = getattr(source, "guarded", None)
    if part.version < HASHED or count != 1 or guarded is None or not part.blobs[0].bytes or part.meta.get("check_block") != CHECK_BLOCK:
        return None
    hashes = np.frombuffer(source.read(part.blobs[-1]), dtype="<u8")
    codes, ids = part.blobs[0], part.blobs[1]
    split = -(-codes.bytes // CHECK_BLOCK)
    if len(hashes) != split + -(-ids.bytes // CHECK_BLOCK):
        raise IndexProblem(f"codes part: {len(hashes)} block hashes do not fit its blobs; the index is damaged.", hint=REBUILD_HINT)

    def checksum(values: np.ndarray) -> Checksum:
        return Checksum(algorithm="xxh3_64", block_size=CHECK_BLOCK, blocks=[f"{int(h):016x}" for h in values])

    return guarded(codes, checksum(hashes[:split]), "the codes"), guarded(ids, checksum(hashes[split:]), "the codes")


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
        if ref.version >= HASHED:
            if meta.get("check_block") != CHECK_BLOCK:
                return [f"its entry names blocks of {meta.get('check_block')!r} bytes, not {CHECK_BLOCK}"]
            expected.append(8 * sum(max(1, -(-n // CHECK_BLOCK)) for n in expected[: 2 * len(spans)]))
        if [blob.bytes for blob in ref.blobs] != expected:
            return [f"its blobs hold {[b.bytes for b in ref.blobs]} bytes, {rows} rows of {width} bytes need {expected}"]
        if ref.version >= HASHED and full:  # the hashes a reader checks blocks against are those of the (sha256-checked) blobs
            hashes = [block_hashes(np.frombuffer(source.read(blob), dtype=np.uint8)) for blob in ref.blobs[: 2 * len(spans)]]
            if not np.array_equal(np.concatenate(hashes), np.frombuffer(source.read(ref.blobs[-1]), dtype="<u8")):
                return ["its block hashes do not match its codes"]
        return []

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> StoredCodes:
        return StoredCodes(parts, source)


CODES = Codes()


@hookimpl(trylast=True)
def lgpt_artifacts() -> tuple[Artifact, ...]:
    """The built-in binary codes (index/artifacts.py lists them after the text's)."""
    return (CODES,)
