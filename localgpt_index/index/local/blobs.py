"""Artifact blobs of a local index: `artifacts/<sha256>.<ext>`, written durably (temporary file,
fsync, rename, fsync of the folder), read back as untrusted input (a regular file inside the
index, of the size the manifest says, with its sha256), collected when no kept generation names them."""

from __future__ import annotations

import hashlib
import mmap
import re
from pathlib import Path

from ...core.errors import IndexProblem
from ..files import TMP_PREFIX, fsync_dir, map_member, plain_files, read_member, same_regular_file, write_atomic
from ..manifest import REBUILD_HINT, BlobRef

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
        created = not self.folder.is_dir()
        self.folder.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(self.root)
        if not same_regular_file(target, len(data)):
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

    def collect(self, live: set[str]) -> None:
        """Delete blobs not in `live` (best effort; temporary files are the sweep's)."""
        try:
            for path in plain_files(self.folder):
                if not path.name.startswith(TMP_PREFIX) and path.name not in live:
                    path.unlink(missing_ok=True)
        except OSError:
            pass

    def delete(self, names: set[str]) -> None:
        try:
            for name in names:
                (self.folder / name).unlink(missing_ok=True)
        except OSError:
            pass
