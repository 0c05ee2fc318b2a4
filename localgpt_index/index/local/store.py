"""The index on disk: immutable, content-named files, and generations that name them.

Layout of one index (`<index-dir>/<name>/`, paths.py `index_path`):

    HEAD                        {"format", "generation", "manifest": "gen-0000000N.json", "sha256"}
    gen-0000000N.json           the manifest (index/format/manifest.py): model, settings, documents, segments
    segments/<id>.vectors.npy   float16 (rows, dim): page vectors, back to back (segments.py)
    segments/<id>.offsets.npy   int64 (pages + 1): page p owns rows offsets[p]:offsets[p+1]
    pdf/<sha256>.pdf            a PDF a converted document was rendered from, named by its own sha256
    lock, lock.owner            the writers' lock, and who holds it (lock.py)
    checked.json                which vectors files a writer checked whole, and their state then (checked.py)

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

import hashlib
import json
import os
import stat
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...core.errors import IndexProblem, MissingIndexFile
from ...core.files import sha256_file
from ..artifact_registry import check_all
from ..format.files import read_member, regular_size
from ..format.manifest import FORMAT, REBUILD_HINT, Head, Manifest, Segment
from ..format.pdfstore import PdfStore
from ..transaction import Transaction, open_transaction
from .blobs import LocalBlobs
from .checked import check_whole
from .lock import writer_lock
from .segments import SegmentFiles, load_segment
from .txn import LocalParts

if TYPE_CHECKING:
    from ..view import LocalView

__all__ = ["LocalStore"]

HEAD_LIMIT = 4096
MANIFEST_LIMIT = 1 << 30


class LocalStore:
    """One named index on disk: reading, checking, and `begin()` for writers."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._mmaps: dict[str, SegmentFiles] = {}
        self._adopted: dict[str, SegmentFiles] = {}

    def adopt(self, other: LocalStore) -> None:
        """Reuse the segments another view of this index has already mapped, and the blocks it has checked:
        a segment is named by its content, so the same id is the same bytes. Those `open` does not need are let go."""
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

    def writable(self) -> LocalStore:
        """This store, about to be written (a local folder is always created on demand)."""
        return self

    def close(self) -> None:
        """Nothing to let go (a Qdrant store closes its client)."""

    def reopened(self) -> LocalStore:
        """A fresh view of this index that reuses the segments this one has checked already."""
        fresh = LocalStore(self.root)
        fresh.adopt(self)
        return fresh

    def open_view(self) -> LocalView:
        """The current generation, checked, as an index view."""
        from ..view import LocalView

        return LocalView(self, self.open())

    def pdf_file(self, rel: str) -> Path:
        """A stored PDF: inside the index and a plain file, else a clear IndexProblem."""
        regular_size(self.root, rel)
        return self.root / rel

    def blob_source(self) -> LocalBlobs:
        """Where this index keeps its artifacts' blobs (read checked)."""
        return LocalBlobs(self.root)

    def size_bytes(self, manifest: Manifest) -> int:
        """Bytes of the files a generation names (not what other generations keep)."""
        total = sum(s.vectors_bytes or 0 for s in manifest.segments.values())
        return total + PdfStore(self.root).size(manifest)  # counted as Qdrant's PDF store counts them

    # reading

    def read_head(self) -> Head | None:
        if not self.exists():
            return None
        raw = read_member(self.root, "HEAD", HEAD_LIMIT)
        try:
            return Head.model_validate(json.loads(raw))
        except (ValueError, RecursionError) as exc:  # ValidationError is a ValueError
            from pydantic import ValidationError

            from ..format.manifest import describe

            detail = describe(exc) if isinstance(exc, ValidationError) else " ".join(str(exc).split())[:200]
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
            raise IndexProblem(f"{self.root / head.manifest}: generation {manifest.generation}, HEAD says {head.generation}.",
                               hint=REBUILD_HINT)
        return manifest

    def open(self) -> Manifest:
        """The current manifest with every segment checked (sizes, headers, offsets; the vectors' blocks when read)."""
        manifest = self.read_manifest()
        if manifest is None:
            raise IndexProblem(
                f"no index at {self.root}.",
                hint="Build one first: lgpt-index build DOCS. Or say where one is: --index-dir DIR or $LGPT_INDEX_DIR "
                     "(and --name); the command line looks for .lgpt-index in this folder and its parents.",
            )
        self.check(manifest)
        self._adopted = {}
        return manifest

    def check(self, manifest: Manifest) -> None:
        """Every segment the manifest names exists and has the recorded size, shape and offsets. Its vectors
        are not read here: each block is checked when first read (`segment_files`)."""
        self._check_folder("segments", required=bool(manifest.segments))
        self._check_folder("pdf", required=False)
        for segment in manifest.segments.values():
            self.segment_files(segment)

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
        """The vectors (memory-mapped, float16) and offsets of a segment, every block checked (once per
        process): for readers of a whole segment. A reader of some pages uses `segment_files`."""
        files = self.segment_files(segment)
        files.check_pages(np.arange(segment.pages))
        return files.vectors, files.offsets

    def segment_files(self, segment: Segment) -> SegmentFiles:
        """A segment's mapped files, its size, header and offsets checked; its blocks checked when read."""
        if segment.id in self._mmaps:
            return self._mmaps[segment.id]
        if segment.storage != "file":
            raise IndexProblem(f"segment {segment.id}: a {segment.storage} segment in a local index; the index is damaged.",
                               hint=REBUILD_HINT)
        adopted = self._adopted.pop(segment.id, None)
        if adopted is not None and adopted.vectors.shape == (segment.rows, segment.dim) and adopted.guard.checksum == segment.checksum:
            self._mmaps[segment.id] = adopted
            return adopted
        self._mmaps[segment.id] = files = load_segment(self.root, segment)
        return files

    def blocks_checked(self) -> int:
        """Blocks of vectors this store has hashed so far (each once)."""
        return sum(files.guard.checked for files in self._mmaps.values())

    def verify_notes(self) -> list[str]:
        """Nothing beside damage: a local index keeps no records of others."""
        return []

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
                files = self.segment_files(segment)
                damaged = files.check_all()  # every block, whatever this process has checked
            except IndexProblem as exc:
                problems.append(exc.message)
                continue
            vec_path = self.segments_dir / f"{segment.id}.vectors.npy"
            if damaged:
                checksum = files.guard.checksum
                shown = ", ".join(str(b) for b in damaged[:5]) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else "")
                problems.append(f"{vec_path}: block{'s' if len(damaged) > 1 else ''} {shown} of {len(checksum.blocks)} "
                                f"({checksum.block_size} bytes each) do{'' if len(damaged) > 1 else 'es'} not match "
                                "the checksums; the vectors are damaged.")
                continue
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
        return problems + check_all(manifest, LocalBlobs(self.root))

    # writing

    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> AbstractContextManager[Transaction]:
        """Take the writers' lock and start a transaction on the current generation.

        A damaged index stops here (exit 1, pointing to --rebuild) unless `rebuild`: then
        the transaction starts from nothing, and numbers its generations after the old ones.
        """
        return open_transaction(LocalParts(self), wait_s, rebuild)

    def _base(self) -> tuple[Manifest | None, int, bool]:
        """The current generation, checked: (manifest, generation, whether its format is older)."""
        head = self.read_head()
        base = self.read_manifest()
        if base is not None:
            self.check(base)  # a writer names these blocks in its generation: every one checked, or recorded as checked
            check_whole(self.root, [(segment, self.segment_files(segment)) for segment in base.segments.values()])
        return base, base.generation if base else 0, head is not None and head.format != FORMAT

    def _highest_generation(self) -> int:
        numbers = [int(p.name[4:-5]) for p in self.root.glob("gen-*.json") if p.name[4:-5].isdigit()]
        try:
            head = self.read_head()
            numbers.append(head.generation if head else 0)
        except IndexProblem:
            pass
        return max(numbers, default=0)

    def lock(self, wait_s: float = 0.0) -> AbstractContextManager[None]:
        """The single-writer lock (local/lock.py)."""
        return writer_lock(self.root, wait_s)
