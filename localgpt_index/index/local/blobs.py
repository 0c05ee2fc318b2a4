"""Artifact blobs of a local index: `artifacts/<sha256>.<ext>`.

Written durably (temporary file, fsync, rename, fsync of the folder), read back as untrusted input (a
regular file inside the index, of the size the manifest says, with its sha256), collected when no
kept generation names them."""

from __future__ import annotations

import hashlib
import mmap
import re
from pathlib import Path

import numpy as np

from ...core.errors import IndexProblem
from ..format.checksums import BlockGuard
from ..format.disk import disk
from ..format.files import TMP_PREFIX, make_folders, map_member, plain_files, read_member, regular_size, same_regular_file, write_atomic
from ..format.manifest import REBUILD_HINT, BlobRef, Checksum

FOLDER = "artifacts"
_EXT = re.compile(r"^[a-z0-9]{1,12}$")


class LocalBlobs:
    """The blob sink and source of one index folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def folder(self) -> Path:
        return self.root / FOLDER

    def put(self, data: bytes, ext: str) -> BlobRef:
        if not _EXT.match(ext):
            raise ValueError(f"a blob's extension is a short lowercase word, not {ext!r}")
        digest = hashlib.sha256(data).hexdigest()
        ref = BlobRef(name=f"{digest}.{ext}", bytes=len(data), sha256=digest)
        target = self.folder / ref.name
        make_folders(self.folder)
        if not same_regular_file(target, len(data)):  # one a killed writer left unsynced was made durable at recovery
            write_atomic(target, data)
        return ref

    def read(self, ref: BlobRef) -> bytes:
        rel = f"{FOLDER}/{ref.name}"
        data = read_member(self.root, rel, ref.bytes)
        if len(data) != ref.bytes or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise IndexProblem(f"{self.root / rel}: checksum mismatch; the artifact is damaged.", hint=REBUILD_HINT)
        return data

    def map(self, ref: BlobRef) -> mmap.mmap | bytes:
        """The blob's bytes, checked like `read`, but mapped read-only: a large blob kept by a reader (the
        codes a first pass scans) is file-backed memory the kernel may drop and read again, not heap."""
        if not ref.bytes:
            return self.read(ref)
        rel = f"{FOLDER}/{ref.name}"
        mapped = map_member(self.root, rel, ref.bytes)
        if hashlib.sha256(mapped).hexdigest() != ref.sha256:
            mapped.close()
            raise IndexProblem(f"{self.root / rel}: checksum mismatch; the artifact is damaged.", hint=REBUILD_HINT)
        return mapped

    def guarded(self, ref: BlobRef, checksum: Checksum, what: str = "the artifact") -> BlockGuard:
        """The blob mapped read-only, not read: a guard checks each block against `checksum` (XXH3 hashes the
        caller read, checked, from another blob) when it is first about to be used (codes version 3). The whole
        blob's sha256 is not checked here (verify does)."""
        rel = f"{FOLDER}/{ref.name}"
        if regular_size(self.root, rel) != ref.bytes or not ref.bytes:
            raise IndexProblem(f"{self.root / rel}: not a regular file of {ref.bytes} bytes; the artifact is damaged.", hint=REBUILD_HINT)
        guard = BlockGuard(self.root / rel, checksum, what, "artifact.check_block")
        guard.advise(np.array([0]), np.array([guard.size]))  # a first pass streams through it: the kernel's read-ahead
        return guard

    def collect(self, live: set[str]) -> None:
        """Delete blobs not in `live` (best effort; temporary files are the sweep's)."""
        try:
            for path in plain_files(self.folder):
                if not path.name.startswith(TMP_PREFIX) and path.name not in live:
                    disk().unlink(path)
        except OSError:
            pass

    def delete(self, names: set[str]) -> None:
        try:
            for name in names:
                disk().unlink(self.folder / name)
        except OSError:
            pass
