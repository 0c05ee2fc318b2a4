"""Segments of a local index: the vectors and offsets files, written page by page and read back checked.

`FileSegmentSink` writes them under a SegmentWriter; `load_segment` reads them back checked, the
vectors block by block when first read."""

from __future__ import annotations

import hashlib
import re
import struct
import uuid
from pathlib import Path

import numpy as np

from ...core.errors import IndexProblem
from ...core.files import sha256_file
from ...core.types import PageRef
from ..format.checksums import CHECK_BLOCK, BlockGuard, block_checksums
from ..format.disk import disk
from ..format.files import TMP_PREFIX as _TMP_PREFIX
from ..format.files import read_member, regular_size
from ..format.manifest import REBUILD_HINT, Checksum, Segment

NPY_HEADER = 128  # bytes: numpy's format 1.0 header, padded to a fixed size so it can be written last


# an .npy header's dictionary as numpy writes it (np.save, any version since 1.0; _npy_header): read without numpy's
# ast.literal_eval, whose AST conversion is not thread-safe in CPython 3.11.7 (gh-106905: a query opening segments beside
# a build's thread raised "SystemError: AST constructor recursion depth mismatch")
_NPY_DICT = re.compile(rb"\{\s*'descr':\s*'([<>|=][a-z]\d+)'\s*,\s*'fortran_order':\s*(True|False)\s*,\s*'shape':\s*"
                       rb"\(((?:\s*\d+\s*,)*\s*(?:\d+\s*)?)\)\s*,?\s*\}\s*")


def read_npy_header(raw: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """The shape, Fortran order and dtype an .npy file's first bytes say, and where its data begins; ValueError
    for a header that is not one numpy writes."""
    if raw[:6] != b"\x93NUMPY" or len(raw) < 12 or raw[6] not in (1, 2, 3):
        raise ValueError("not an .npy header")
    (length,), start = (struct.unpack_from("<H", raw, 8), 10) if raw[6] == 1 else (struct.unpack_from("<I", raw, 8), 12)
    found = _NPY_DICT.fullmatch(raw[start: start + length])
    if found is None:
        raise ValueError("an .npy header of another form")
    shape = tuple(int(number) for number in found.group(3).split(b",") if number.strip())
    return shape, found.group(2) == b"True", np.dtype(found.group(1).decode()), start + length


def _npy_header(rows: int, dim: int) -> bytes:
    """numpy's format 1.0 header for a (rows, dim) float16 array, padded to NPY_HEADER bytes."""
    text = "{'descr': '<f2', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    text = text.ljust(NPY_HEADER - 11) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


class FileSegmentSink:
    """Appends pages of vectors to a segment on disk as they arrive, so memory holds one page,
    not the segment; `seal` names the files by their content and returns the entry. (A local
    segment does not need to know whose page a row is: the manifest's spans say it.)"""

    def __init__(self, folder: Path, dim: int) -> None:
        self.folder = folder
        self.dim = dim
        tag = uuid.uuid4().hex[:12]
        self._vectors = folder / f"{_TMP_PREFIX}{tag}.vectors.npy"
        self._offsets = folder / f"{_TMP_PREFIX}{tag}.offsets.npy"
        self._disk = disk()
        self._handle = self._disk.create(self._vectors)
        self._handle.write(b"\0" * NPY_HEADER)

    def write(self, row: int, block: np.ndarray, page: PageRef | None) -> None:
        self._handle.write(block.tobytes())

    def flush(self) -> None:
        self._handle.flush()

    def seal(self, lengths: list[int], dim: int) -> Segment:
        """Write the header and offsets, fsync, and move both files to their content names."""
        rows = sum(lengths)
        self._handle.seek(0)
        self._handle.write(_npy_header(rows, self.dim))
        self._disk.sync(self._handle)
        self._handle.close()
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
        handle = self._disk.create(self._offsets)
        try:
            np.save(handle, offsets)
            self._disk.sync(handle)
        finally:
            handle.close()
        vectors_sha, offsets_sha = sha256_file(self._vectors), sha256_file(self._offsets)
        segment = Segment(
            id="seg-" + hashlib.sha256(f"{vectors_sha}:{offsets_sha}".encode()).hexdigest()[:40],
            pages=len(lengths),
            rows=rows,
            dim=self.dim,
            vectors_bytes=self._vectors.stat().st_size,
            vectors_sha256=vectors_sha,
            offsets_sha256=offsets_sha,
            checksum=Checksum(algorithm="xxh3_64", block_size=CHECK_BLOCK, blocks=block_checksums(self._vectors)),
        )
        self._disk.replace(self._vectors, self.folder / f"{segment.id}.vectors.npy")
        self._disk.replace(self._offsets, self.folder / f"{segment.id}.offsets.npy")
        self._disk.sync_dir(self.folder)
        return segment

    def discard(self) -> None:
        if not self._handle.closed:
            self._handle.close()
        for path in (self._vectors, self._offsets):
            self._disk.unlink(path)


class SegmentFiles:
    """A segment's vectors (memory-mapped float16, not read until scored) and offsets, with the
    guard that checks a block of the vectors when it is first read."""

    GROUP_BYTES = 32 << 20  # vectors checked then scored at a time: a full scan reads each block once, while it is cached

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray, guard: BlockGuard, header: int) -> None:
        self.vectors, self.offsets, self.guard, self.header = vectors, offsets, guard, header
        self.row_bytes = vectors.shape[1] * 2

    def check_pages(self, pages: np.ndarray) -> None:
        """The blocks holding these pages' vectors are checked (each once per process); IndexProblem if damaged."""
        pages = np.asarray(pages, dtype=np.int64)
        if len(pages):
            starts = self.header + self.offsets[pages] * self.row_bytes
            ends = self.header + self.offsets[pages + 1] * self.row_bytes
            if not self.guard.all_checked(starts, ends):
                self.guard.advise(starts, ends)
                self.guard.check_spans(starts, ends)
            else:  # checked once already in this process: a long range is still streamed, short ones (a query's
                self.guard.advise(starts, ends, short=False)  # hits, just scored) are read as they are

    def scattered_reads(self, pages: np.ndarray) -> list[tuple[BlockGuard, int, int]]:
        """The short byte ranges (whole blocks) that scoring `pages` (in row order) reads: for checksums.prefetch."""
        pages = np.asarray(pages, dtype=np.int64)
        starts = self.header + self.offsets[pages] * self.row_bytes
        ends = self.header + self.offsets[pages + 1] * self.row_bytes
        return [(self.guard, lo, hi) for lo, hi in self.guard.scattered(starts, ends)]

    def checked_groups(self, pages: np.ndarray):
        """`pages` (in row order) in groups of about GROUP_BYTES of vectors, each checked just before
        it is yielded: a scan streams through the file once, checking as it goes."""
        for part in self.groups(pages):
            self.check_pages(part)
            yield part

    def groups(self, pages: np.ndarray) -> list[np.ndarray]:
        """`pages` (in row order) in groups of about GROUP_BYTES of vectors, not checked yet (check_pages)."""
        pages = np.asarray(pages, dtype=np.int64)
        sizes = (self.offsets[pages + 1] - self.offsets[pages]) * self.row_bytes
        group = np.cumsum(sizes) // self.GROUP_BYTES
        cuts = np.flatnonzero(np.diff(group)) + 1
        return np.split(pages, cuts) if len(pages) else []

    def check_all(self) -> list[int]:
        """Every block checked (verify): the damaged ones."""
        return self.guard.check_all()


def load_segment(root: Path, segment: Segment) -> SegmentFiles:
    """A segment's files, checked against the manifest without reading the vectors: sha256 of the
    offsets, size and header of the vectors, dtypes and shapes. Blocks of vectors are checked when read."""
    vec_rel, off_rel = f"segments/{segment.id}.vectors.npy", f"segments/{segment.id}.offsets.npy"
    offsets_raw = read_member(root, off_rel, NPY_HEADER + 8 * (segment.pages + 1) + 4096)
    if hashlib.sha256(offsets_raw).hexdigest() != segment.offsets_sha256:
        raise IndexProblem(f"{root / off_rel}: checksum mismatch; the segment offsets are damaged.", hint=REBUILD_HINT)
    size = regular_size(root, vec_rel)
    if size != segment.vectors_bytes:
        raise IndexProblem(
            f"{root / vec_rel}: {size} bytes, the manifest says {segment.vectors_bytes}; the file is damaged.", hint=REBUILD_HINT
        )
    check = segment.checksum
    if check is None:  # a Qdrant segment listed in a local index
        raise IndexProblem(f"segment {segment.id}: the manifest gives its vectors no checksum.", hint=REBUILD_HINT)
    header = size - segment.rows * segment.dim * 2
    try:
        offsets = _offsets(offsets_raw)
        _check_header(root / vec_rel, header, segment)
        guard = BlockGuard(root / vec_rel, check)
    except (OSError, ValueError, EOFError) as exc:
        raise IndexProblem(f"segment {segment.id}: unreadable array ({' '.join(str(exc).split())[:200]}).", hint=REBUILD_HINT) from None
    if offsets.dtype != np.int64 or offsets.shape != (segment.pages + 1,) or offsets[0] != 0 or offsets[-1] != segment.rows \
            or np.any(np.diff(offsets) <= 0):
        raise IndexProblem(f"segment {segment.id}: shapes do not match the manifest; the index is damaged.", hint=REBUILD_HINT)
    # the vectors as the scorer reads them: the guard's own mapping (one set of page-cache hints)
    vectors = guard.raw[header:].view("<f2").reshape(segment.rows, segment.dim)
    return SegmentFiles(vectors, offsets, guard, header)


def _offsets(raw: bytes) -> np.ndarray:
    shape, fortran, dtype, start = read_npy_header(raw)
    if len(shape) != 1 or fortran or dtype != np.dtype("<i8"):
        raise ValueError(f"the offsets' header says {dtype} {shape}, not int64 (pages + 1,)")
    return np.frombuffer(raw, "<i8", count=shape[0], offset=start).copy()


def _check_header(path: Path, length: int, segment: Segment) -> None:
    """The npy header says what the manifest says (float16, C order, its shape) and ends where the
    vectors begin: the vectors are then mapped at that offset, whatever the header's own bytes are
    (they are checked with block 0)."""
    with open(path, "rb") as handle:
        raw = handle.read(length)
    shape, fortran, dtype, start = read_npy_header(raw)
    if shape != (segment.rows, segment.dim) or fortran or dtype != np.dtype("<f2") or start != length:
        order = " in Fortran order" if fortran else ""
        raise ValueError(f"the header says {dtype} {shape}{order}, not float16 ({segment.rows}, {segment.dim})")
