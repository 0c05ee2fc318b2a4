"""The content-addressed PDF store both backends keep converted PDFs in: `<root>/pdf/<sha256>.pdf`.

A local index keeps it inside its folder; a Qdrant index in its --pdf-store folder. Writes are
durable before a commit can name them (copy to a temporary file, fsync, rename, fsync of the
folder); a file is reused only when it is a regular file of the same size (never through a
link); what a transaction staged but never committed is discarded when it ends, and after each
commit the PDFs no kept generation names (the new one, the previous one that a slow reader may
still be on, and what is staged) are collected.

A folder shared by several indexes (a --pdf-store given to more than one Qdrant collection) is
cleaned up through reference records (`SharedRefs`): one index's manifests cannot tell which PDFs
another still names, so each index keeps `<folder>/refs/<key>.json` ({"location", "pdfs"}: the PDFs
its kept generations name and those it has staged), and a PDF is deleted only when no record names
it. Without records (`owned=False`, `refs=None`) such a folder only gains files.

Every step of the records runs under a short lock on `<folder>/.lock`: `put` records a name *before*
it copies or reuses the file (so a collector never deletes a file another index has just decided to
reuse), and collection rewrites this index's record, then deletes what no record names. A record of
an index that is gone keeps its PDFs (safe; delete its record to let them go).

A folder that already held PDFs when its first record was written (filled by an lgpt-index from
before records, whose indexes have none) is never collected: `refs/COLLECT` is created only with
the first record of a folder whose `pdf/` is empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ...core.errors import IndexBusy
from ...core.failpoints import failpoint
from ...core.files import sha256_file
from .disk import copy_into, disk
from .files import TMP_PREFIX, make_folders, plain_files, regular_size, same_regular_file, sweep_temporary, write_atomic
from .manifest import Manifest

FOLDER = "pdf"
REFS = "refs"
COLLECT = "COLLECT"
LOCK_WAIT_S = 120.0


def named_pdfs(manifests: Iterable[Manifest | None]) -> set[str]:
    """The stored PDFs these generations name (documents and conversions in progress)."""
    return {d.pdf for m in manifests if m is not None for d in [*m.documents, *m.in_progress] if d.pdf}


class PdfStore:
    """One index's view of a PDF folder: put, check, size, and (when it owns the folder) clean up."""

    def __init__(self, root: Path, *, owned: bool = True, marker: str | None = None,
                 refs: SharedRefs | None = None) -> None:
        """`owned`: only this index writes here (collect and discard by its manifests);
        `refs`: a shared folder's reference records (collect and discard by every index's records);
        `marker`: a file created in `root` on the first put (discovery skips a folder holding it)."""
        self.root = Path(root)
        self.owned = owned
        self.marker = marker
        self.refs = None if owned else refs
        self.staged: set[str] = set()
        self.added: set[str] = set()  # names this transaction added to a shared folder's record

    @property
    def folder(self) -> Path:
        return self.root / FOLDER

    def put(self, pdf: Path) -> tuple[str, str]:
        """Keep `pdf` under its own sha256 and stage it; returns (its name, its sha256)."""
        digest = sha256_file(pdf)
        rel = f"{FOLDER}/{digest}.pdf"
        if self.refs is None:
            self._put(pdf, rel)
        else:
            with self.refs.locked():  # recorded before the copy or the reuse: no collector deletes it meanwhile
                mine = self.refs.mine()
                if rel not in mine:
                    self.added.add(rel)
                    self.refs.write(mine | {rel})
                self._put(pdf, rel)
        if self.owned or self.refs is not None:
            self.staged.add(rel)
        return rel, digest

    def _put(self, pdf: Path, rel: str) -> None:
        target = self.root / rel
        make_folders(self.folder)
        if self.marker and not os.path.lexists(self.root / self.marker):
            write_atomic(self.root / self.marker, b"")
        if not same_regular_file(target, pdf.stat().st_size):  # one a killed writer left unsynced: durable since recovery
            tmp = self.folder / f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}.pdf"
            ops = disk()
            handle = ops.create(tmp)
            try:
                copy_into(pdf, handle)
                ops.sync(handle)
            finally:
                handle.close()
            failpoint("pdf-store")
            ops.replace(tmp, target)
            ops.sync_dir(self.folder)

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
        """Delete PDFs no kept generation names nor this transaction has staged (best effort);
        in a shared folder, those no index's record names."""
        live = named_pdfs(keep) | self.staged
        if self.owned:
            self._delete_unnamed(live, None)
        elif self.refs is not None:
            self._collect_shared(live, None)

    def _collect_shared(self, mine: set[str], only: set[str] | None) -> None:
        """This index's record becomes `mine`; PDFs (of `only`, if given) no record names are deleted."""
        if self.refs is None:
            return
        try:
            with self.refs.locked():
                self.refs.write(mine)
                live = self.refs.named()
                if live is not None:
                    self._delete_unnamed(live, only)
        except (OSError, IndexBusy):
            pass  # the next commit tries again

    def _delete_unnamed(self, live: set[str], only: set[str] | None) -> None:
        try:
            for path in plain_files(self.folder):
                rel = f"{FOLDER}/{path.name}"
                if not path.name.startswith(TMP_PREFIX) and rel not in live and (only is None or rel in only):
                    disk().unlink(path)
        except OSError:
            pass  # the next commit tries again

    def discard(self, keep: list[Manifest | None]) -> None:
        """At the end of a transaction: staged PDFs no kept generation names are deleted (in a
        shared folder: unless another index's record names them)."""
        unnamed = self.staged - named_pdfs(keep)
        if self.refs is not None:
            dropped = self.added - named_pdfs(keep)  # what this transaction recorded and no commit kept
            if dropped:
                self._collect_shared(self.refs.mine() - dropped, dropped)
            self.added.clear()
        else:
            try:
                for rel in unnamed:
                    disk().unlink(self.root / rel)
            except OSError:
                pass  # the next writer's commit collects them
        self.staged.clear()

    def recover(self) -> None:
        """A killed writer's temporary copies deleted and the PDFs it renamed into place made durable (a put
        reuses them): in a folder this index owns, or under a shared folder's lock (every put copies under
        it, so a temporary file seen then is a dead writer's)."""
        if self.owned:
            self._recover()
        elif self.refs is not None and self.folder.is_dir():
            try:
                with self.refs.locked():
                    self._recover()
            except IndexBusy:
                pass

    def _recover(self) -> None:
        sweep_temporary([self.folder])
        if self.folder.is_dir():
            disk().sync_dir(self.folder)


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
