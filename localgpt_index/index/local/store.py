"""The index on disk: immutable, content-named files, and generations that name them.

Layout of one index (`<index-dir>/<name>/`):

    HEAD                        {"format", "generation", "manifest": "gen-0000000N.json", "sha256"}
    gen-0000000N.json           the manifest (index/manifest.py): model, settings, documents, segments
    segments/<id>.vectors.npy   float16 (rows, dim): page vectors, back to back
    segments/<id>.offsets.npy   int64 (pages + 1): page p owns rows offsets[p]:offsets[p+1]
    pdf/<sha256>.pdf            a PDF a converted document was rendered from, named by its own sha256
    lock, lock.owner            the writers' lock, and who holds it

Every writer (build, remove, import, re-tagging) goes through one `Transaction`: it
writes new files only, under names derived from their content; stages segments on disk
as pages arrive; replaces HEAD atomically (fsync of the file before and of the folder
after); turns every OSError into one message saying which generation the index keeps;
and deletes what no live generation names afterwards.

The folder is untrusted input: every name read from HEAD or a manifest matches a
pattern, resolves inside the index, is a regular file (never a FIFO or a device) of a
bounded size, and its content is checked against the manifest before it is used.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import re
import socket
import stat
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...core.errors import IndexBusy, IndexProblem, UsageError
from ...core.failpoints import failpoint
from ...core.files import sha256_file
from ...core.types import PageRef
from ..errors import IndexWriteError, MissingIndexFile
from ..files import TMP_PREFIX as _TMP_PREFIX
from ..files import fsync_dir as _fsync_dir
from ..files import plain_files, read_member, regular_size, sweep_temporary
from ..files import write_atomic as _write_atomic
from ..manifest import (
    CHECK_BLOCK,
    FORMAT,
    REBUILD_HINT,
    Checksum,
    Document,
    Failure,
    Head,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
)
from ..pdfstore import PdfStore

if TYPE_CHECKING:
    from ..view import IndexView

DEFAULT_INDEX_DIR = ".lgpt-index"
DEFAULT_INDEX_NAME = "default"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
HEAD_LIMIT = 4096
MANIFEST_LIMIT = 1 << 30
NPY_HEADER = 128  # bytes: numpy's format 1.0 header, padded to a fixed size so it can be written last


def index_path(index_dir: str | os.PathLike | None, name: str | None) -> Path:
    """Where an index lives: option, else $LGPT_INDEX_DIR, else ./.lgpt-index; then the name."""
    base = Path(index_dir or os.environ.get("LGPT_INDEX_DIR") or DEFAULT_INDEX_DIR)
    name = name or os.environ.get("LGPT_INDEX_NAME") or DEFAULT_INDEX_NAME
    if not NAME_PATTERN.match(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise UsageError(f"index name {shown!r}: use up to 100 letters, digits, '-' and '_', starting with a letter or digit.")
    return base / name


# hashing


def block_checksums(path: Path, algorithm: str = "xxh3_64", block_size: int = CHECK_BLOCK) -> list[str]:
    """One hash per `block_size` bytes of the file, as 16 hex digits. XXH3 runs at memory speed,
    so every open can afford it; `sum64` is format 1's wrapping word sum, kept to read old indexes.
    The file is read through one small buffer: hashing a segment never maps it into memory."""
    import xxhash

    buffer = bytearray(min(block_size, 4 << 20))
    hashes = []
    with open(path, "rb", buffering=0) as handle:
        while True:
            hasher, total, left = xxhash.xxh3_64(), 0, block_size
            while left:
                count = handle.readinto(memoryview(buffer)[: min(left, len(buffer))])
                if not count:
                    break
                left -= count
                if algorithm == "xxh3_64":
                    hasher.update(memoryview(buffer)[:count])
                else:
                    total += _sum64(np.frombuffer(buffer, dtype=np.uint8, count=count))
            if left == block_size and hashes:
                break  # the file ended on a block boundary
            hashes.append(f"{hasher.intdigest() if algorithm == 'xxh3_64' else total % (1 << 64):016x}")
            if left:
                break
    return hashes


def _sum64(block: np.ndarray) -> int:
    whole = len(block) // 8 * 8
    total = int(np.add.reduce(block[:whole].view("<u8"), dtype=np.uint64)) if whole else 0
    total += int(block[whole:].astype(np.uint64).sum()) << 1
    return total % (1 << 64)


def _npy_header(rows: int, dim: int) -> bytes:
    """numpy's format 1.0 header for a (rows, dim) float16 array, padded to NPY_HEADER bytes."""
    text = "{'descr': '<f2', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    text = text.ljust(NPY_HEADER - 11) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


class IndexStore:
    """One named index on disk: reading, checking, and `begin()` for writers."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._mmaps: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._adopted: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def adopt(self, other: IndexStore) -> None:
        """Reuse the segments another view of this index has already checked and mapped: a segment
        is named by its content, so the same id is the same bytes. Those `open` does not need are let go."""
        self._adopted = dict(other._mmaps)

    @property
    def segments_dir(self) -> Path:
        return self.root / "segments"

    @property
    def location(self) -> str:
        """Where the index is, for people: its folder."""
        return str(self.root)

    @property
    def local_folders(self) -> tuple[Path, ...]:
        """Folders of this machine the index occupies (a build never indexes them)."""
        return (self.root,)

    def exists(self) -> bool:
        return os.path.lexists(self.root / "HEAD")

    def head_key(self) -> tuple:
        """Changes whenever a commit replaces HEAD (a new inode each time), read without opening it."""
        try:
            info = os.stat(self.root / "HEAD")
        except OSError:
            return ()
        return info.st_ino, info.st_mtime_ns, info.st_size

    def writable(self) -> IndexStore:
        """This store, about to be written (a local folder is always created on demand)."""
        return self

    def close(self) -> None:
        """Nothing to let go (a Qdrant store closes its client)."""

    def reopened(self) -> IndexStore:
        """A fresh view of this index that reuses the segments this one has checked already."""
        fresh = IndexStore(self.root)
        fresh.adopt(self)
        return fresh

    def open_view(self) -> IndexView:
        """The current generation, checked, as an index view."""
        from ..view import IndexView

        return IndexView(self, self.open())

    def pdf_file(self, rel: str) -> Path:
        """A stored PDF: inside the index and a plain file, else a clear IndexProblem."""
        regular_size(self.root, rel)
        return self.root / rel

    def size_bytes(self, manifest: Manifest) -> int:
        """Bytes of the files a generation names (not what other generations keep)."""
        total = sum(s.vectors_bytes or 0 for s in manifest.segments.values())
        for rel in {d.pdf for d in [*manifest.documents, *manifest.in_progress] if d.pdf}:
            try:
                total += (self.root / rel).lstat().st_size
            except OSError:
                pass
        return total

    # reading

    def read_head(self) -> Head | None:
        if not self.exists():
            return None
        raw = read_member(self.root, "HEAD", HEAD_LIMIT)
        try:
            return Head.model_validate(json.loads(raw))
        except (ValueError, RecursionError) as exc:  # ValidationError is a ValueError
            from ..manifest import describe

            detail = describe(exc) if hasattr(exc, "errors") else " ".join(str(exc).split())[:200]
            raise IndexProblem(f"{self.root / 'HEAD'}: the index pointer is malformed ({detail}).", hint=REBUILD_HINT) from None

    def read_manifest(self) -> Manifest | None:
        """The current generation's manifest, validated (None when there is no index)."""
        head = self.read_head()
        if head is None:
            return None
        raw = read_member(self.root, head.manifest, MANIFEST_LIMIT)
        if hashlib.sha256(raw).hexdigest() != head.sha256:
            raise IndexProblem(f"{self.root / head.manifest}: checksum mismatch; the manifest is damaged.", hint=REBUILD_HINT)
        manifest = Manifest.from_json(raw, str(self.root / head.manifest))
        if manifest.generation != head.generation:
            raise IndexProblem(f"{self.root / head.manifest}: generation {manifest.generation}, HEAD says {head.generation}.", hint=REBUILD_HINT)
        return manifest

    def open(self) -> Manifest:
        """The current manifest with every segment checked (sizes, offsets, block checksums)."""
        manifest = self.read_manifest()
        if manifest is None:
            raise IndexProblem(
                f"no index at {self.root}.", hint="Build one first: lgpt-index build DOCS (or pass --index-dir / --name)."
            )
        self.check(manifest)
        self._adopted = {}
        return manifest

    def check(self, manifest: Manifest) -> None:
        """Every segment the manifest names exists, has the recorded shape, and matches its checksums."""
        self._check_folder("segments", required=bool(manifest.segments))
        self._check_folder("pdf", required=False)
        for segment in manifest.segments.values():
            self.segment_arrays(segment)

    def _check_folder(self, name: str, required: bool) -> None:
        path = self.root / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            if required:
                raise MissingIndexFile(f"{path} is missing.", hint=REBUILD_HINT) from None
            return
        if not stat.S_ISDIR(info.st_mode):
            raise IndexProblem(f"{path}: not a folder (a link or a file); the index is damaged.", hint=REBUILD_HINT)

    def segment_arrays(self, segment: Segment) -> tuple[np.ndarray, np.ndarray]:
        """The vectors (memory-mapped, float16) and offsets of a segment, checked against the manifest."""
        if segment.id in self._mmaps:
            return self._mmaps[segment.id]
        if segment.storage != "file":
            raise IndexProblem(f"segment {segment.id}: a {segment.storage} segment in a local index; the index is damaged.",
                               hint=REBUILD_HINT)
        adopted = self._adopted.pop(segment.id, None)
        if adopted is not None and adopted[0].shape == (segment.rows, segment.dim):
            self._mmaps[segment.id] = adopted
            return adopted
        vec_rel, off_rel = f"segments/{segment.id}.vectors.npy", f"segments/{segment.id}.offsets.npy"
        offsets_raw = read_member(self.root, off_rel, NPY_HEADER + 8 * (segment.pages + 1) + 4096)
        if hashlib.sha256(offsets_raw).hexdigest() != segment.offsets_sha256:
            raise IndexProblem(f"{self.root / off_rel}: checksum mismatch; the segment offsets are damaged.", hint=REBUILD_HINT)
        size = regular_size(self.root, vec_rel)
        if size != segment.vectors_bytes:
            raise IndexProblem(
                f"{self.root / vec_rel}: {size} bytes, the manifest says {segment.vectors_bytes}; the file is damaged.", hint=REBUILD_HINT
            )
        check = segment.checksum
        if block_checksums(self.root / vec_rel, check.algorithm, check.block_size) != check.blocks:
            raise IndexProblem(f"{self.root / vec_rel}: checksum mismatch; the vectors are damaged.", hint=REBUILD_HINT)
        try:
            offsets = np.load(io.BytesIO(offsets_raw), allow_pickle=False)
            vectors = np.load(self.root / vec_rel, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise IndexProblem(f"segment {segment.id}: unreadable array ({' '.join(str(exc).split())[:200]}).", hint=REBUILD_HINT) from None
        if (
            vectors.dtype != np.float16
            or vectors.shape != (segment.rows, segment.dim)
            or offsets.dtype != np.int64
            or offsets.shape != (segment.pages + 1,)
            or offsets[0] != 0
            or offsets[-1] != segment.rows
            or np.any(np.diff(offsets) <= 0)
        ):
            raise IndexProblem(f"segment {segment.id}: shapes do not match the manifest; the index is damaged.", hint=REBUILD_HINT)
        self._mmaps[segment.id] = (vectors, offsets)
        return vectors, offsets

    def verify(self) -> list[str]:
        """Check everything against the manifest, full sha256 of every file included; the problems found."""
        try:
            manifest = self.read_manifest()
            if manifest is None:
                return [f"no index at {self.root}."]
            self._check_folder("segments", required=bool(manifest.segments))
            self._check_folder("pdf", required=False)
        except IndexProblem as exc:
            return [exc.message]
        problems: list[str] = []
        for segment in manifest.segments.values():
            try:
                self.segment_arrays(segment)
            except IndexProblem as exc:
                problems.append(exc.message)
                continue
            vec_path = self.segments_dir / f"{segment.id}.vectors.npy"
            if sha256_file(vec_path) != segment.vectors_sha256:
                problems.append(f"{vec_path}: sha256 mismatch; the vectors are damaged.")
        pdfs = {(d.pdf, d.pdf_sha256, d.path) for d in [*manifest.documents, *manifest.in_progress] if d.pdf}
        for rel, expected, source in sorted(pdfs):
            try:
                regular_size(self.root, rel)
            except IndexProblem as exc:
                problems.append(f"{exc.message} (the converted PDF of {source})")
                continue
            if sha256_file(self.root / rel) != expected:
                problems.append(f"{self.root / rel}: sha256 mismatch; the converted PDF of {source} is damaged.")
        return problems

    # writing

    @contextmanager
    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> Iterator[Transaction]:
        """Take the writers' lock and start a transaction on the current generation.

        A damaged index stops here (exit 1, pointing to --rebuild) unless `rebuild`: then
        the transaction starts from nothing, and numbers its generations after the old ones.
        """
        with self.lock(wait_s):
            upgrade = False
            try:
                head = self.read_head()
                base = self.read_manifest()
                if base is not None:
                    self.check(base)
                generation = base.generation if base else 0
                upgrade = head is not None and head.format != FORMAT
            except IndexProblem as exc:
                if not rebuild:
                    raise IndexProblem(f"{exc.message} Nothing was changed.", hint=REBUILD_HINT) from None
                base, generation = None, self._highest_generation()
            transaction = Transaction(self, base, generation)
            transaction.needs_upgrade = upgrade
            transaction.collect_temporary()
            try:
                yield transaction
            finally:
                transaction.discard_staged()

    def _highest_generation(self) -> int:
        numbers = [int(p.name[4:-5]) for p in self.root.glob("gen-*.json") if p.name[4:-5].isdigit()]
        try:
            head = self.read_head()
            numbers.append(head.generation if head else 0)
        except IndexProblem:
            pass
        return max(numbers, default=0)

    @contextmanager
    def lock(self, wait_s: float = 0.0) -> Iterator[None]:
        """The single-writer lock: an OS lock (filelock: flock on Unix), so a killed writer never
        leaves it behind. The holder then records who it is in `lock.owner` for contenders."""
        import filelock

        if not math.isfinite(wait_s) or wait_s < 0:
            raise UsageError(f"--wait {wait_s}: expected a number of seconds, 0 or more.")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(self.root / "lock", thread_local=False)
            lock.acquire(timeout=wait_s, poll_interval=0.2)
        except filelock.Timeout:
            raise IndexBusy(
                f"{self.root} is being written by {self._lock_holder()}.",
                hint="Wait for it to finish, or pass --wait SECONDS.",
            ) from None
        except OSError as exc:
            raise IndexProblem(
                f"{self.root / 'lock'}: cannot take the writers' lock ({exc.strerror or exc}).",
                hint="The index folder must be writable, and its 'lock' a plain file (delete it if it is a folder).",
            ) from None
        try:
            try:
                host = socket.gethostname()
                _write_atomic(self.root / "lock.owner", f"pid {os.getpid()} on {host}".encode())
            except OSError:
                pass  # only informative
            yield
        finally:
            lock.release()

    def _lock_holder(self) -> str:
        """Who holds the lock, from its record; a record of a process that is gone is a previous
        holder's, so read again while the new holder writes its own."""
        record = ""
        for _ in range(20):
            try:
                record = read_member(self.root, "lock.owner", 256).decode(errors="replace").strip()
            except IndexProblem:
                record = ""
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


class SegmentWriter:
    """Appends pages of vectors to a segment on disk as they arrive, so memory holds one page,
    not the segment; `finish` names the files by their content and returns the entry."""

    def __init__(self, folder: Path, dim: int) -> None:
        self.folder = folder
        self.dim = dim
        self.lengths: list[int] = []
        tag = uuid.uuid4().hex[:12]
        self._vectors = folder / f"{_TMP_PREFIX}{tag}.vectors.npy"
        self._offsets = folder / f"{_TMP_PREFIX}{tag}.offsets.npy"
        self._handle = open(self._vectors, "wb")
        self._handle.write(b"\0" * NPY_HEADER)

    @property
    def pages(self) -> int:
        return len(self.lengths)

    def append(self, vectors: np.ndarray, page: PageRef | None = None) -> int:
        """Add one page (tokens, dim); returns its index in the segment. (`page` says whose page it
        is; a local segment does not need to know: the manifest's spans say it.)"""
        page = np.ascontiguousarray(vectors, dtype=np.float16)
        if page.ndim != 2 or page.shape[1] != self.dim or page.shape[0] < 1:
            raise ValueError(f"a page of shape {page.shape}, expected (tokens >= 1, {self.dim})")
        self._handle.write(page.tobytes())
        self.lengths.append(int(page.shape[0]))
        if len(self.lengths) == 2:
            self._handle.flush()
            failpoint("write-vectors")
        return len(self.lengths) - 1

    def finish(self) -> Segment:
        """Write the header and offsets, fsync, and move both files to their content names."""
        rows = sum(self.lengths)
        self._handle.seek(0)
        self._handle.write(_npy_header(rows, self.dim))
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(self.lengths, dtype=np.int64), out=offsets[1:])
        with open(self._offsets, "wb") as handle:
            np.save(handle, offsets)
            handle.flush()
            os.fsync(handle.fileno())
        vectors_sha, offsets_sha = sha256_file(self._vectors), sha256_file(self._offsets)
        segment = Segment(
            id="seg-" + hashlib.sha256(f"{vectors_sha}:{offsets_sha}".encode()).hexdigest()[:40],
            pages=len(self.lengths),
            rows=rows,
            dim=self.dim,
            vectors_bytes=self._vectors.stat().st_size,
            vectors_sha256=vectors_sha,
            offsets_sha256=offsets_sha,
            checksum=Checksum(algorithm="xxh3_64", blocks=block_checksums(self._vectors)),
        )
        os.replace(self._vectors, self.folder / f"{segment.id}.vectors.npy")
        os.replace(self._offsets, self.folder / f"{segment.id}.offsets.npy")
        _fsync_dir(self.folder)
        return segment

    def discard(self) -> None:
        if not self._handle.closed:
            self._handle.close()
        for path in (self._vectors, self._offsets):
            path.unlink(missing_ok=True)


class Transaction:
    """One writer's changes to an index: staged files, then commits that switch HEAD.

    Commit as often as wanted (a plain build commits every batch); each commit is one new
    generation. Files staged but never committed are deleted when the transaction ends.
    """

    def __init__(self, store: IndexStore, base: Manifest | None, generation: int) -> None:
        self.store = store
        self.base = base
        self.generation = generation  # the generation HEAD points to now
        self.current = base  # the last manifest committed (or the base)
        self._segments: dict[str, Segment] = dict(base.segments) if base else {}
        self._staged_segments: set[str] = set()
        self.pdfs = PdfStore(store.root)
        self.previous: Manifest | None = None  # the generation before `current` (a slow reader may still be on it)
        self._writers: list[SegmentWriter] = []
        self.needs_upgrade = False  # the index is in an older format: the next commit writes the current one

    @property
    def root(self) -> Path:
        return self.store.root

    def pdf_path(self, rel: str) -> Path:
        return self.store.root / rel

    def _last(self) -> str:
        return f"generation {self.generation}" if self.generation else "no generation (it is still empty)"

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Turn any OSError into one message that says what the index keeps."""
        try:
            yield
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                hint = "Free some space and run the command again: a build carries on from the last commit."
            else:
                hint = "Fix the cause (permissions, the disk) and run the command again."
            raise IndexWriteError(f"could not write to {self.root}: {reason}; the index keeps {self._last()}.", hint=hint) from None

    def segment_writer(self, dim: int) -> SegmentWriter:
        with self.writing():
            self.store.segments_dir.mkdir(parents=True, exist_ok=True)
            writer = SegmentWriter(self.store.segments_dir, dim)
        self._writers.append(writer)
        return writer

    def finish_segment(self, writer: SegmentWriter) -> Segment | None:
        """Seal a writer's segment (None when it received no page) and stage it for the next commit."""
        self._writers.remove(writer)
        if not writer.pages:
            writer.discard()
            return None
        with self.writing():
            try:
                segment = writer.finish()
            except BaseException:
                writer.discard()
                raise
        self._segments[segment.id] = segment
        self._staged_segments.add(segment.id)
        return segment

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment:
        """A whole segment at once (imports, tests)."""
        writer = self.segment_writer(dim)
        with self.writing():
            for number, page in enumerate(pages):
                writer.append(page, refs[number] if refs else None)
        segment = self.finish_segment(writer)
        if segment is None:
            raise ValueError("a segment needs at least one page")
        return segment

    def store_pdf(self, pdf: Path) -> tuple[str, str]:
        """Keep a converted PDF, named by the sha256 of its own bytes; returns its name and sha256."""
        with self.writing():
            return self.pdfs.put(pdf)

    def commit(
        self,
        documents: Sequence[Document],
        model: ModelInfo,
        settings: Settings,
        failures: Sequence[Failure] = (),
        in_progress: Sequence[Document] = (),
    ) -> Manifest:
        """Make a new generation of exactly these documents; returns its manifest."""
        live = {span.segment for doc in [*documents, *in_progress] for span in doc.spans}
        missing = live - set(self._segments)
        if missing:
            raise ValueError(f"documents name segments this transaction does not know: {sorted(missing)[:3]}")
        with self.writing():
            segments = {sid: self._upgraded(self._segments[sid]) for sid in sorted(live)}
            manifest = Manifest.model_construct(
                generation=self.generation + 1,
                created=time.time(),
                model=model,
                settings=settings,
                segments=segments,
                documents=sorted(documents, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                in_progress=sorted(in_progress, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                failures=list(failures),
            )
            manifest._references_resolve()
            raw = manifest.to_json()
            name = f"gen-{manifest.generation:08d}.json"
            _write_atomic(self.root / name, raw)
            failpoint("before-head")
            head = Head(format=manifest.format, generation=manifest.generation, manifest=name, sha256=hashlib.sha256(raw).hexdigest())
            _write_atomic(self.root / "HEAD", head.model_dump_json().encode())
            failpoint("after-head")
        self.previous, self.current, self.generation = self.current, manifest, manifest.generation
        self._staged_segments -= live
        self.pdfs.committed(manifest)
        self._collect([m for m in (manifest, self.previous) if m is not None])
        return manifest

    def _upgraded(self, segment: Segment) -> Segment:
        """Format 1's word sums (already checked when the index was opened) replaced by XXH3."""
        if segment.checksum.algorithm == "xxh3_64":
            return segment
        path = self.store.segments_dir / f"{segment.id}.vectors.npy"
        upgraded = segment.model_copy(update={"checksum": Checksum(algorithm="xxh3_64", blocks=block_checksums(path))})
        self._segments[segment.id] = upgraded
        return upgraded

    def _collect(self, keep: list[Manifest]) -> None:
        """Delete files that neither the new nor the previous generation names (a reader that
        has just read the old HEAD can still open it), nor this transaction has staged."""
        live_manifests = {f"gen-{m.generation:08d}.json" for m in keep}
        live_segments = {s for m in keep for s in m.segments} | self._staged_segments
        try:
            for path in self.root.iterdir():
                if path.name.startswith("gen-") and path.name.endswith(".json") and path.name not in live_manifests:
                    path.unlink(missing_ok=True)
            for path in plain_files(self.store.segments_dir):
                if not path.name.startswith(_TMP_PREFIX) and path.name.split(".")[0] not in live_segments:
                    path.unlink(missing_ok=True)
        except OSError:
            pass  # collection is best effort; the next commit tries again
        self.pdfs.collect(keep)

    def collect_temporary(self) -> None:
        """Temporary files of writers that were killed (only the lock holder writes, so none is live)."""
        sweep_temporary([self.root, self.store.segments_dir])
        self.pdfs.sweep_temporary()

    def discard_staged(self) -> None:
        """At the end: close segment writers still open, and delete what was staged but never committed."""
        for writer in list(self._writers):
            writer.discard()
        self._writers.clear()
        live = self.current
        live_segments = set(live.segments) if live else set()
        try:
            for sid in self._staged_segments - live_segments:
                for suffix in (".vectors.npy", ".offsets.npy"):
                    (self.store.segments_dir / f"{sid}{suffix}").unlink(missing_ok=True)
        except OSError:
            pass  # the next writer's commit collects them
        self._staged_segments.clear()
        self.pdfs.discard([self.current, self.previous])
