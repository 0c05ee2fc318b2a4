"""Reference records for a PDF folder several indexes share (a --pdf-store given to more than one
Qdrant collection): one index's manifests cannot tell which PDFs another still names, so each
index keeps `<folder>/refs/<key>.json` ({"location", "pdfs"}: the PDFs its kept generations name
and those it has staged), and a PDF is deleted only when no record names it.

Every step runs under a short lock on `<folder>/.lock`: `put` records a name *before* it copies or
reuses the file (so a collector never deletes a file another index has just decided to reuse), and
collection rewrites this index's record, then deletes what no record names. A record of an index
that is gone keeps its PDFs (safe; delete its record to let them go).

A folder that already held PDFs when its first record was written (filled by an lgpt-index from
before records, whose indexes have none) is never collected: `refs/COLLECT` is created only with
the first record of a folder whose `pdf/` is empty.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...core.errors import IndexBusy
from .files import make_folders, plain_files, write_atomic

REFS = "refs"
COLLECT = "COLLECT"
LOCK_WAIT_S = 120.0


class SharedRefs:
    """One index's record in a shared PDF folder, and the folder's lock."""

    def __init__(self, root: Path, location: str) -> None:
        self.root = Path(root)
        self.location = location
        self.key = hashlib.sha256(location.encode("utf-8", "surrogateescape")).hexdigest()[:16]

    @property
    def folder(self) -> Path:
        return self.root / REFS

    @property
    def record(self) -> Path:
        return self.folder / f"{self.key}.json"

    @contextmanager
    def locked(self) -> Iterator[None]:
        import filelock

        make_folders(self.root)
        lock = filelock.FileLock(self.root / ".lock", thread_local=False)
        try:
            lock.acquire(timeout=LOCK_WAIT_S, poll_interval=0.05)
        except filelock.Timeout:
            raise IndexBusy(f"{self.root}: the PDF store's lock is held by another writer.",
                            hint="Another build writes to this --pdf-store; run this one again when it is done.") from None
        try:
            yield
        finally:
            lock.release()

    def mine(self) -> set[str]:
        return self._read(self.record) or set()

    def write(self, pdfs: set[str]) -> None:
        """Replace this index's record (under the lock); the first record of a fresh folder enables collection."""
        if not self.folder.is_dir():
            fresh = not any(p.name.endswith(".pdf") for p in plain_files(self.root / "pdf"))
            make_folders(self.folder)
            if fresh:
                write_atomic(self.folder / COLLECT, b"PDFs no record names are deleted\n")
        write_atomic(self.record, json.dumps({"location": self.location, "pdfs": sorted(pdfs)}).encode())

    def named(self) -> set[str] | None:
        """Every PDF some record names; None: collection is not allowed here (an older folder, or a
        record that cannot be read: then nothing is deleted)."""
        if not (self.folder / COLLECT).is_file():
            return None
        names: set[str] = set()
        for path in plain_files(self.folder):
            if path.name.endswith(".json"):
                found = self._read(path)
                if found is None:
                    return None
                names |= found
        return names

    @staticmethod
    def _read(path: Path) -> set[str] | None:
        try:
            data = json.loads(path.read_bytes())
            return {str(name) for name in data["pdfs"]}
        except (OSError, ValueError, KeyError, TypeError):
            return None
