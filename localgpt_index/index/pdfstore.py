"""The content-addressed PDF store both backends keep converted PDFs in: `<root>/pdf/<sha256>.pdf`.

A local index keeps it inside its folder; a Qdrant index in its --pdf-store folder. Writes are
durable before a commit can name them (copy to a temporary file, fsync, rename, fsync of the
folder); a file is reused only when it is a regular file of the same size (never through a
link); what a transaction staged but never committed is discarded when it ends, and after each
commit the PDFs no kept generation names (the new one, the previous one that a slow reader may
still be on, and what is staged) are collected.

A folder shared by several indexes (a --pdf-store given to more than one Qdrant collection) is
never collected nor discarded from: one index's manifests cannot tell which PDFs another still
names. `owned=False` says so; such a folder only gains files, as it did before.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..core.failpoints import failpoint
from ..core.files import sha256_file
from .files import TMP_PREFIX, fsync_dir, plain_files, regular_size, sweep_temporary
from .manifest import Manifest

FOLDER = "pdf"


def named_pdfs(manifests: Iterable[Manifest | None]) -> set[str]:
    """The stored PDFs these generations name (documents and conversions in progress)."""
    return {d.pdf for m in manifests if m is not None for d in [*m.documents, *m.in_progress] if d.pdf}


class PdfStore:
    """One index's view of a PDF folder: put, check, size, and (when it owns the folder) clean up."""

    def __init__(self, root: Path, *, owned: bool = True, marker: str | None = None) -> None:
        """`owned`: only this index writes here (collect and discard allowed);
        `marker`: a file created in `root` on the first put (discovery skips a folder holding it)."""
        self.root = Path(root)
        self.owned = owned
        self.marker = marker
        self.staged: set[str] = set()

    @property
    def folder(self) -> Path:
        return self.root / FOLDER

    def put(self, pdf: Path) -> tuple[str, str]:
        """Keep `pdf` under its own sha256 and stage it; returns (its name, its sha256)."""
        digest = sha256_file(pdf)
        rel = f"{FOLDER}/{digest}.pdf"
        target = self.root / rel
        created = not self.folder.is_dir()
        self.folder.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(self.root)
        if self.marker:
            (self.root / self.marker).touch()
        if not _same_regular_file(target, pdf.stat().st_size):
            tmp = self.folder / f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}.pdf"
            shutil.copyfile(pdf, tmp)
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            failpoint("pdf-store")
            os.replace(tmp, target)
            fsync_dir(self.folder)
        if self.owned:
            self.staged.add(rel)
        return rel, digest

    def path(self, rel: str) -> Path:
        """A stored PDF, checked: inside the folder, a regular file (else IndexProblem/MissingIndexFile)."""
        regular_size(self.root, rel)
        return self.root / rel

    def size(self, manifest: Manifest) -> int:
        """Bytes of the stored PDFs a generation names (links and missing files count nothing)."""
        total = 0
        for rel in named_pdfs([manifest]):
            try:
                info = (self.root / rel).lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
        return total

    def committed(self, manifest: Manifest) -> None:
        """What a commit named is no longer staged."""
        self.staged -= named_pdfs([manifest])

    def collect(self, keep: Sequence[Manifest | None]) -> None:
        """Delete PDFs no kept generation names nor this transaction has staged (best effort)."""
        if not self.owned:
            return
        live = named_pdfs(keep) | self.staged
        try:
            for path in plain_files(self.folder):
                if not path.name.startswith(TMP_PREFIX) and f"{FOLDER}/{path.name}" not in live:
                    path.unlink(missing_ok=True)
        except OSError:
            pass  # the next commit tries again

    def discard(self, keep: list[Manifest | None]) -> None:
        """At the end of a transaction: staged PDFs no kept generation names are deleted."""
        try:
            for rel in self.staged - named_pdfs(keep):
                (self.root / rel).unlink(missing_ok=True)
        except OSError:
            pass  # the next writer's commit collects them
        self.staged.clear()

    def sweep_temporary(self) -> None:
        """A killed writer's temporary copies (only in a folder this index owns: elsewhere they may be live)."""
        if self.owned:
            sweep_temporary([self.folder])


def _same_regular_file(target: Path, size: int) -> bool:
    try:
        info = target.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size
