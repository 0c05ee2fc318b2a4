"""The index on disk: immutable segments of vectors, and generations that name them.

Layout of one index (`<index-dir>/<name>/`):

    HEAD                      {"generation": N, "manifest": "gen-0000000N.json", "sha256": ...}
    gen-0000000N.json         the manifest: model, settings, documents, segments, failures
    segments/<id>.vectors.npy float16 (rows, dim): every page's token vectors, back to back
    segments/<id>.offsets.npy int64 (pages + 1): page p owns rows offsets[p]:offsets[p+1]
    pdf/<sha256>.pdf          the PDF a converted document was rendered from
    lock                      an OS-level lock held by the one writer

A commit writes new files only, then replaces HEAD with an atomic rename
(fsync of the file before and of the directory after). Readers follow HEAD, so
they see the old generation or the new one, never a mix.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from . import __version__
from .errors import IndexBusy, IndexProblem
from .failpoints import failpoint


class MissingIndexFile(IndexProblem):
    """A file the manifest names is gone (damage, or a writer collected it under a slow reader)."""

FORMAT = "lgpt-index/1"
CHECK_BLOCK = 64 << 20
DEFAULT_INDEX_DIR = ".lgpt-index"
DEFAULT_INDEX_NAME = "default"


@dataclass
class DocumentEntry:
    path: str  # absolute source path (undecodable bytes kept as surrogate escapes)
    sha256: str
    size: int
    mtime: float
    kind: str
    pages: int
    segment: str
    first_page: int  # index of its first page inside the segment
    converter: str | None = None
    pdf: str | None = None  # PDF inside the index, for converted documents
    pdf_sha256: str | None = None
    metadata: dict = field(default_factory=dict)


@dataclass
class SegmentEntry:
    id: str
    pages: int
    rows: int
    dim: int
    vectors_bytes: int
    vectors_sha256: str
    offsets_sha256: str
    vectors_sum64: list[int] = field(default_factory=list)  # one per CHECK_BLOCK bytes, checked on open


@dataclass
class Manifest:
    generation: int
    model: dict
    settings: dict
    documents: list[DocumentEntry] = field(default_factory=list)
    segments: dict[str, SegmentEntry] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    tool_version: str = __version__
    format: str = FORMAT

    @property
    def page_count(self) -> int:
        return sum(d.pages for d in self.documents)

    def to_json(self) -> str:
        data = asdict(self)
        data["segments"] = {k: asdict(v) for k, v in self.segments.items()}
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise IndexProblem(f"unknown index format {data.get('format')!r} (this tool reads {FORMAT}).")
        data["documents"] = [DocumentEntry(**d) for d in data["documents"]]
        data["segments"] = {k: SegmentEntry(**v) for k, v in data["segments"].items()}
        return cls(**data)


def _fsync_dir(path: Path) -> None:
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_path(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def block_sums(path: Path) -> list[int]:
    """Per CHECK_BLOCK bytes, the wrapping 64-bit sum of the block read as little-endian uint64.

    Any flipped byte or lost tail changes it, and it runs at memory speed (a CRC
    would cost a second per few GB), so every open can afford it.
    """
    data = np.memmap(path, dtype=np.uint8, mode="r")
    sums = []
    for start in range(0, max(len(data), 1), CHECK_BLOCK):
        block = data[start : start + CHECK_BLOCK]
        whole = len(block) // 8 * 8
        total = int(np.add.reduce(block[:whole].view("<u8"), dtype=np.uint64)) if whole else 0
        total += int(block[whole:].astype(np.uint64).sum()) << 1  # tail bytes, weighted apart from words
        sums.append(total % (1 << 64))
    del data
    return sums


def index_path(index_dir: str | os.PathLike | None, name: str | None) -> Path:
    """Where an index lives: option, else $LGPT_INDEX_DIR, else ./.lgpt-index; then the name."""
    base = Path(index_dir or os.environ.get("LGPT_INDEX_DIR") or DEFAULT_INDEX_DIR)
    name = name or os.environ.get("LGPT_INDEX_NAME") or DEFAULT_INDEX_NAME
    if not name or "/" in name or "\\" in name or name.startswith("."):
        from .errors import UsageError

        raise UsageError(f"index name {name!r}: use letters, digits, '-' and '_' only.")
    return base / name


class IndexStore:
    """One named index on disk."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._mmaps: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def segments_dir(self) -> Path:
        return self.root / "segments"

    def exists(self) -> bool:
        return (self.root / "HEAD").exists()

    # reading

    def read_manifest(self) -> Manifest | None:
        head_path = self.root / "HEAD"
        if not head_path.exists():
            return None
        try:
            head = json.loads(head_path.read_text())
            raw = (self.root / head["manifest"]).read_bytes()
        except (OSError, ValueError, KeyError) as exc:
            raise IndexProblem(f"{self.root}: the index pointer or manifest is unreadable ({exc}).") from exc
        if _sha256_bytes(raw) != head.get("sha256"):
            raise IndexProblem(f"{self.root / head['manifest']}: checksum mismatch; the manifest is damaged.")
        return Manifest.from_json(raw.decode())

    def segment_arrays(self, segment: SegmentEntry) -> tuple[np.ndarray, np.ndarray]:
        """The vectors (memory-mapped, float16) and offsets of a segment, checked against the manifest."""
        if segment.id in self._mmaps:
            return self._mmaps[segment.id]
        vec_path = self.segments_dir / f"{segment.id}.vectors.npy"
        off_path = self.segments_dir / f"{segment.id}.offsets.npy"
        try:
            offsets_raw = off_path.read_bytes()
            if _sha256_bytes(offsets_raw) != segment.offsets_sha256:
                raise IndexProblem(f"{off_path}: checksum mismatch; the segment offsets are damaged.")
            offsets = np.load(off_path)
            if vec_path.stat().st_size != segment.vectors_bytes:
                raise IndexProblem(
                    f"{vec_path}: {vec_path.stat().st_size} bytes, the manifest says {segment.vectors_bytes}; the file is damaged."
                )
            if segment.vectors_sum64 and block_sums(vec_path) != segment.vectors_sum64:
                raise IndexProblem(f"{vec_path}: checksum mismatch; the vectors are damaged.")
            vectors = np.load(vec_path, mmap_mode="r")
        except FileNotFoundError as exc:
            raise MissingIndexFile(f"segment {segment.id}: {exc.filename} is missing.") from exc
        except OSError as exc:
            raise IndexProblem(f"segment {segment.id}: {exc.strerror or exc}.") from exc
        except ValueError as exc:
            raise IndexProblem(f"segment {segment.id}: unreadable array ({exc}).") from exc
        if (
            vectors.dtype != np.float16
            or vectors.shape != (segment.rows, segment.dim)
            or offsets.shape != (segment.pages + 1,)
            or offsets[0] != 0
            or offsets[-1] != segment.rows
            or np.any(np.diff(offsets) <= 0)
        ):
            raise IndexProblem(f"segment {segment.id}: shapes do not match the manifest; the index is damaged.")
        self._mmaps[segment.id] = (vectors, offsets)
        return vectors, offsets

    def verify(self) -> list[str]:
        """Check everything against the manifest, full checksums included; returns the problems found."""
        try:
            manifest = self.read_manifest()
        except IndexProblem as exc:
            return [exc.message]
        if manifest is None:
            return [f"no index at {self.root}."]
        problems: list[str] = []
        for segment in manifest.segments.values():
            try:
                self.segment_arrays(segment)
            except IndexProblem as exc:
                problems.append(exc.message)
                continue
            vec_path = self.segments_dir / f"{segment.id}.vectors.npy"
            if sha256_path(vec_path) != segment.vectors_sha256:
                problems.append(f"{vec_path}: sha256 mismatch; the vectors are damaged.")
        for doc in manifest.documents:
            segment = manifest.segments.get(doc.segment)
            if segment is None:
                problems.append(f"{doc.path}: its segment {doc.segment} is not in the manifest.")
            elif doc.pages < 1 or doc.first_page < 0 or doc.first_page + doc.pages > segment.pages:
                problems.append(f"{doc.path}: pages {doc.first_page}..{doc.first_page + doc.pages} lie outside segment {doc.segment}.")
            if doc.pdf:
                pdf = self.root / doc.pdf
                if not pdf.exists():
                    problems.append(f"{pdf}: missing (the converted PDF of {doc.path}).")
                elif doc.pdf_sha256 and sha256_path(pdf) != doc.pdf_sha256:
                    problems.append(f"{pdf}: sha256 mismatch; the converted PDF of {doc.path} is damaged.")
        return problems

    # writing (callers hold the lock)

    @contextmanager
    def lock(self, wait_s: float = 0.0) -> Iterator[None]:
        """The single-writer lock: an OS lock, so a killed writer never leaves it behind.

        The holder writes one fixed-width record ("pid N on HOST") at the start of the
        lock file with a single write, so a contender reads a whole record, never half.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        try:
            while True:
                try:
                    _try_lock(fd)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                    if time.monotonic() >= deadline:
                        raise IndexBusy(
                            f"{self.root} is being written by {_lock_holder(fd)}.",
                            hint="Wait for it to finish, or pass --wait SECONDS.",
                        ) from None
                    time.sleep(0.2)
            host = os.uname().nodename if hasattr(os, "uname") else "this machine"
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"pid {os.getpid()} on {host}".ljust(_LOCK_RECORD)[:_LOCK_RECORD].encode())
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def write_segment(
        self, page_vectors: Iterable[np.ndarray], lengths: Sequence[int] | None = None, dim: int | None = None
    ) -> SegmentEntry:
        """Write one segment holding `page_vectors` in order; files are fsynced before this returns.

        With `lengths` and `dim` given, `page_vectors` may be a generator: nothing is held
        in memory but the page being written.
        """
        if lengths is None or dim is None:
            page_vectors = list(page_vectors)
            lengths = [len(v) for v in page_vectors]
            dim = int(page_vectors[0].shape[1])
        self.segments_dir.mkdir(parents=True, exist_ok=True)
        seg_id = f"seg-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
        vec_path = self.segments_dir / f"{seg_id}.vectors.npy"
        off_path = self.segments_dir / f"{seg_id}.offsets.npy"
        out = np.lib.format.open_memmap(vec_path, mode="w+", dtype=np.float16, shape=(int(offsets[-1]), dim))
        for number, (vectors, start) in enumerate(zip(page_vectors, offsets[:-1])):
            out[start : start + len(vectors)] = vectors
            if number == len(lengths) // 2:
                out.flush()
                failpoint("write-vectors")
        out.flush()
        del out
        with open(vec_path, "rb+") as handle:
            os.fsync(handle.fileno())
        with open(off_path, "wb") as handle:
            np.save(handle, offsets)
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_dir(self.segments_dir)
        return SegmentEntry(
            id=seg_id,
            pages=len(lengths),
            rows=int(offsets[-1]),
            dim=dim,
            vectors_bytes=vec_path.stat().st_size,
            vectors_sha256=sha256_path(vec_path),
            offsets_sha256=sha256_path(off_path),
            vectors_sum64=block_sums(vec_path),
        )

    def store_pdf(self, sha256: str, pdf: Path) -> tuple[str, str]:
        """Keep a converted PDF, named by the source's sha256; returns its path inside the index and its own sha256."""
        rel = f"pdf/{sha256}.pdf"
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(pdf, tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        return rel, sha256_path(target)

    def commit(self, manifest: Manifest) -> None:
        """Make `manifest` the current generation, atomically, then drop what nothing names.

        The previous generation's files are kept one more commit, so a reader that
        read the old HEAD a moment ago can still open what it names.
        """
        try:
            previous = self.read_manifest()
        except IndexProblem:
            previous = None
        name = f"gen-{manifest.generation:08d}.json"
        raw = manifest.to_json().encode()
        _write_atomic(self.root / name, raw)
        failpoint("before-head")
        head = {"format": FORMAT, "generation": manifest.generation, "manifest": name, "sha256": _sha256_bytes(raw)}
        _write_atomic(self.root / "HEAD", json.dumps(head).encode())
        failpoint("after-head")
        self._collect_garbage([m for m in (manifest, previous) if m is not None])

    def _collect_garbage(self, keep: list[Manifest]) -> None:
        live_manifests = {f"gen-{m.generation:08d}.json" for m in keep}
        live_segments = {s for m in keep for s in m.segments}
        live_pdfs = {d.pdf.split("/")[-1] for m in keep for d in m.documents if d.pdf}
        for path in self.root.iterdir():
            if path.is_file() and (
                (path.name.startswith("gen-") and path.name not in live_manifests) or path.name.endswith(".tmp")
            ):
                path.unlink(missing_ok=True)
        for folder, live in ((self.segments_dir, live_segments), (self.root / "pdf", live_pdfs)):
            if folder.exists():
                for path in folder.iterdir():
                    key = path.name.split(".")[0] if folder == self.segments_dir else path.name
                    if key not in live:
                        path.unlink(missing_ok=True)


_LOCK_RECORD = 128


def _lock_holder(fd: int) -> str:
    """Who holds the lock, from its record; a record of a process that is gone is the previous
    holder's, so read again while the new holder is writing its own."""
    record = ""
    for _ in range(20):
        os.lseek(fd, 0, os.SEEK_SET)
        record = os.read(fd, _LOCK_RECORD).decode(errors="replace").strip()
        parts = record.split()
        if len(parts) >= 2 and parts[0] == "pid" and parts[1].isdigit() and _alive(int(parts[1])):
            return record
        time.sleep(0.05)
    return record or "another process"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_lock(fd: int) -> None:
    if os.name == "nt":  # pragma: no cover - exercised on Windows only
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
