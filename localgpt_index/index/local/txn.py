"""The local backend of the transaction: segments staged as files, generations published by HEAD.

A generation is published by writing `gen-N.json` then replacing HEAD; files no kept generation
names are collected."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.errors import IndexProblem
from ..artifacts import blob_names
from ..format.checksums import CHECK_BLOCK, rechecksum
from ..format.disk import disk
from ..format.files import TMP_PREFIX, make_folders, plain_files, sweep_temporary, write_atomic
from ..format.manifest import Checksum, Document, Head, Manifest, Segment
from ..format.pdfstore import PdfStore
from ..transaction import Transaction
from .blobs import LocalBlobs
from .segments import FileSegmentSink

if TYPE_CHECKING:
    from ..transaction import SegmentSink


class LocalHold:
    """The writers' file lock, as the core sees it: nothing to fence (a lock cannot be taken over)."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex

    def fence(self) -> None:
        """A file lock held is held until released."""


class LocalBackend:
    """What only a local folder does in a transaction; the rest is `Transaction`'s."""

    dtype: type = np.float16
    needs_page = False
    unused_artifacts: frozenset[str] = frozenset()

    def __init__(self, store: Any, upgrade: bool = False) -> None:  # an LocalStore (local/store.py imports this module)
        self.store = store
        self.root: Path = store.root
        self.location = str(store.root)
        self._upgrade = upgrade
        self.txn: Transaction | None = None
        self.blobs = LocalBlobs(self.root)

    @property
    def segments_dir(self) -> Path:
        return self.store.segments_dir

    def attach(self, txn: Transaction) -> None:
        self.txn = txn

    def translate(self) -> AbstractContextManager[None]:
        return nullcontext()

    def recover(self) -> bool:
        """Temporary files of writers that were killed (only the lock holder writes, so none is live) are
        deleted, and what a killed writer renamed into place without its folder's fsync is made durable
        (a HEAD it switched, the folders it made: the index's, the index folder's): this writer may build
        on it or reuse it."""
        sweep_temporary([self.root, self.segments_dir, self.blobs.folder])
        for folder in (self.root.parent.parent, self.root.parent, self.root, self.segments_dir, self.blobs.folder):
            if folder.is_dir():
                disk().sync_dir(folder)
        return self._upgrade

    def sink(self, dim: int) -> SegmentSink:
        make_folders(self.segments_dir)
        return FileSegmentSink(self.segments_dir, dim)

    def blob_sink(self) -> LocalBlobs:
        return self.blobs

    def base_blobs(self) -> LocalBlobs:
        return self.blobs

    def pdf_path(self, rel: str) -> Path:
        """A stored PDF, checked: inside the index, a regular file (never a FIFO planted as pdf/<sha>.pdf)."""
        return self.store.pdf_file(rel)

    def prepare(self, documents: list[Document], in_progress: list[Document], generation: int,
                dim: int) -> tuple[list[Document], list[Document]]:
        return documents, in_progress

    def segment_record(self, segment: Segment) -> Segment:
        """Format 1's word sums and the 64 MiB blocks of segments written before lazy checks replaced by
        XXH3 of CHECK_BLOCK blocks, in one read that checks the old hashes (checksums.rechecksum)."""
        check = segment.checksum
        if check is None or (check.algorithm == "xxh3_64" and check.block_size == CHECK_BLOCK):  # None: no files to check
            return segment
        path = self.segments_dir / f"{segment.id}.vectors.npy"
        return segment.model_copy(update={"checksum": Checksum(algorithm="xxh3_64", block_size=CHECK_BLOCK,
                                                               blocks=rechecksum(path, check))})

    def write_catalog(self, manifest: Manifest) -> object:
        raw = manifest.to_json()
        name = f"gen-{manifest.generation:08d}.json"
        write_atomic(self.root / name, raw)
        return Head(format=manifest.format, generation=manifest.generation, manifest=name, sha256=hashlib.sha256(raw).hexdigest())

    def publish(self, manifest: Manifest, receipt: object) -> None:
        assert isinstance(receipt, Head)
        write_atomic(self.root / "HEAD", receipt.model_dump_json().encode())

    def after_publish(self) -> None:
        """Nothing: HEAD is what readers follow."""

    def _staged(self) -> set[str]:
        return self.txn.staging.staged if self.txn is not None else set()

    def _staged_blobs(self) -> set[str]:
        return self.txn.staging.blobs if self.txn is not None else set()

    def collect(self, keep: list[Manifest]) -> None:
        """Delete files that no kept generation names (a reader that has just read the old HEAD can
        still open the previous one), nor this transaction has staged. Best effort."""
        live_manifests = {f"gen-{m.generation:08d}.json" for m in keep}
        live_segments = {s for m in keep for s in m.segments} | self._staged()
        try:
            for path in self.root.iterdir():
                if path.name.startswith("gen-") and path.name.endswith(".json") and path.name not in live_manifests:
                    disk().unlink(path)
            for path in plain_files(self.segments_dir):
                if not path.name.startswith(TMP_PREFIX) and path.name.split(".")[0] not in live_segments:
                    disk().unlink(path)
        except OSError:
            pass  # the next commit tries again
        self.blobs.collect(blob_names(keep) | self._staged_blobs())

    def discard(self, keep: list[Manifest]) -> None:
        """Staged segments no kept generation names are deleted (the next writer's commit collects
        what this cannot)."""
        named = {s for m in keep for s in m.segments}
        try:
            for sid in self._staged() - named:
                for suffix in (".vectors.npy", ".offsets.npy"):
                    disk().unlink(self.segments_dir / f"{sid}{suffix}")
        except OSError:
            pass
        self.blobs.delete(self._staged_blobs() - blob_names(keep))


class LocalParts:
    """What a local store gives begin()'s template (transaction.open_transaction)."""

    def __init__(self, store: Any) -> None:  # an LocalStore
        self.store = store
        self.upgrade = False

    def before_write(self) -> None:
        """Nothing to refuse: a local folder is created on demand."""

    @contextmanager
    def hold(self, wait_s: float) -> Iterator[LocalHold]:
        with self.store.lock(wait_s):
            yield LocalHold()

    def read_base(self) -> tuple[Manifest | None, int]:
        base, generation, self.upgrade = self.store._base()
        return base, generation

    def damaged_base(self) -> int:
        return self.store._highest_generation()

    def recorded_base(self) -> Manifest | None:
        try:
            return self.store.read_manifest()
        except IndexProblem:
            return None

    def backend(self, base: Manifest | None, rebuild: bool, hold: object) -> LocalBackend:
        return LocalBackend(self.store, self.upgrade)

    def pdf_store(self) -> PdfStore:
        return PdfStore(self.store.root)


