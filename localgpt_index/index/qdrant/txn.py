"""The Qdrant backend of the transaction core: rows staged as PENDING points, a generation published
by copying/showing/removing points, writing catalog chunks and replacing HEAD by compare-and-swap
(then, for a rebuild, switching the alias); see qdrant/store.py's docstring for the scheme.

A Qdrant store writes no "codes" parts (`QdrantBackend.unused_artifacts`): its first pass is Qdrant's own
binary quantization, so they would be blobs no reader uses. Segments of older collections keep theirs:
their manifests still name them, so verify checks them and collection keeps them until no kept generation does."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import IndexProblem, IndexWriteError
from ...core.failpoints import failpoint
from ..artifacts import blob_names
from ..format.manifest import FORMAT, Document, Manifest, Segment
from ..format.pdfstore import PdfStore
from ..transaction import SegmentSink, Transaction, kept
from . import commit as steps
from . import recover as setup
from .blobs import QdrantBlobs
from .ids import PENDING, LeaseLost, _flt, _models, catalog_of
from .lease import _Lease, hold_lease
from .sparse import SparseCommit, after_head, with_reference, write_vectors
from .writer import PointSink


class LeaseHold:
    """The lease, as the core sees it: its token, and a fence that stops a writer that lost it."""

    def __init__(self, lease: _Lease | None) -> None:
        self.lease = lease
        self.token = lease.token if lease else uuid.uuid4().hex

    def fence(self) -> None:
        """Stop (LeaseLost) unless this writer still holds its lease with time to spare."""
        if self.lease is not None:
            self.lease.check()


class QdrantBackend:
    """What only Qdrant does in a transaction; the rest is `Transaction`'s. The step functions
    (qdrant/commit.py, recover.py, writer.py) take this object as their `txn`."""

    dtype: type = np.float32
    needs_page = True
    unused_artifacts: frozenset[str] = frozenset({"codes"})  # not written: the first pass is Qdrant's (qdrant/quantization.py)

    def __init__(self, store: Any, physical: str | None, base: Manifest | None, rebuild: bool,  # a QdrantStore
                 lease: _Lease | None = None) -> None:
        self.store, self.lease = store, lease
        self.location = store.location
        self.previous_physical = physical
        self.rebuild = rebuild or physical is None or base is None
        self.physical = f"{store.spec.collection}__{uuid.uuid4().hex[:10]}" if self.rebuild or physical is None else physical
        self._created = False
        self._owners: dict[str, list[str]] = {}  # staged segment -> the path of each row
        self._committed_owners: dict[tuple[str, int], str] | None = None
        self._sparse: SparseCommit | None = None  # written by write_catalog before HEAD; after_publish rewrites them if due (sparse.py)
        self.txn: Transaction

    def attach(self, txn: Transaction) -> None:
        self.txn = txn
        txn.artifacts = tuple(a for a in txn.artifacts if a.name not in self.unused_artifacts)

    # what the step functions read of the transaction

    @property
    def client(self):
        return self.store.client

    @property
    def catalog(self) -> str:
        return catalog_of(self.physical)

    @property
    def token(self) -> str:
        return self.txn.token

    @property
    def base(self) -> Manifest | None:
        return self.txn.base

    @property
    def current(self) -> Manifest | None:
        return self.txn.current

    @property
    def generation(self) -> int:
        return self.txn.generation

    @property
    def _segments(self) -> dict[str, Segment]:
        return self.txn.staging.segments

    @property
    def _staged(self) -> set[str]:
        return self.txn.staging.staged

    def mark_written(self) -> None:
        self.txn.staging.wrote = True

    @property
    def needs_upgrade(self) -> bool:
        return self.txn.needs_upgrade

    @needs_upgrade.setter
    def needs_upgrade(self, value: bool) -> None:
        self.txn.needs_upgrade = value

    def fence(self) -> None:
        self.txn.fence()

    def writing(self):
        return self.txn.writing()

    @contextmanager
    def translate(self) -> Iterator[None]:
        """Client errors as one message; any other problem while writing says what the index keeps
        (after a fence: a takeover, whose recovery deleted what we wrote, is said as such)."""
        try:
            with self.store.talking("writing"):
                yield
        except LeaseLost:
            raise
        except IndexProblem as exc:
            if isinstance(exc, IndexWriteError):
                raise
            self.fence()
            raise IndexWriteError(f"{exc.message} The index keeps {kept(self.txn.generation)}.",
                                  hint="Fix the cause and run the command again: a build carries on from the last commit.") from None

    # the backend's steps

    def recover(self) -> bool:
        """Undo what a writer killed before its commit left: points and catalog chunks above HEAD's
        generation, pages it made visible or removed, and physical collections of a rebuild that
        never switched the alias. True: the catalog is of an older format (the next commit writes the current one)."""
        models = _models()
        g = self.generation
        ours = re.compile(rf"^{re.escape(self.store.spec.collection)}__[0-9a-f]{{10}}(__catalog)?$")
        keep = {self.previous_physical, catalog_of(self.previous_physical)} if self.previous_physical else set()
        with self.writing():
            for name in [c.name for c in self.client.get_collections().collections]:
                if ours.match(name) and name not in keep and self.store.ours_shaped(name):
                    self.client.delete_collection(name)
            if self.previous_physical is None or self.base is None:
                return False
            physical = self.previous_physical
            setup.claim_head(self, physical)
            self.client.delete(physical, points_selector=models.FilterSelector(filter=_flt(gen_written=(g + 1, PENDING))))
            self.client.set_payload(physical, {"visible_from": PENDING}, points=_flt(visible_from=(g + 1, PENDING - 1)))
            self.client.delete_payload(physical, keys=["gen_removed"], points=_flt(gen_removed=(g + 1, PENDING)))
            self.client.delete(catalog_of(physical), points_selector=models.FilterSelector(
                filter=_flt(generation=(g + 1, PENDING))))
            if self.store.legacy_paths and not self.rebuild:
                setup.upgrade_paths(self)
            setup.upgrade_quantization(self)
            upgrade = self.store.head_format != FORMAT and not self.rebuild
        self._created = not self.rebuild
        return upgrade

    def sink(self, dim: int) -> SegmentSink:
        setup.ensure_collections(self, dim)
        return PointSink(self, dim)

    def blob_sink(self) -> QdrantBlobs:
        return QdrantBlobs(self.store, self.catalog)

    def base_blobs(self) -> QdrantBlobs:
        fallback = catalog_of(self.previous_physical) if self.previous_physical else None
        return QdrantBlobs(self.store, self.catalog, fallback)

    def pdf_path(self, rel: str) -> Path:
        return self.store.pdf_file(rel)

    def prepare(self, documents: list[Document], in_progress: list[Document], generation: int,
                dim: int) -> tuple[list[Document], list[Document]]:
        """Pages of other paths copied, complete documents made visible, pages no document names removed."""
        setup.ensure_collections(self, dim)
        documents = [steps.owned(self, d, generation) for d in documents]
        in_progress = [steps.owned(self, d, PENDING) for d in in_progress]
        failpoint("write-vectors")
        failpoint("before-switch")
        self.fence()  # nothing of the commit's switch is written by a writer that lost its lease
        steps.show(self, documents, generation)
        steps.remove_unnamed(self, documents, in_progress, generation)
        return documents, in_progress

    def segment_record(self, segment: Segment) -> Segment:
        return segment

    def write_catalog(self, manifest: Manifest) -> object:
        self._sparse = write_vectors(self, manifest, self.current, self.physical != self.previous_physical and self.current is self.base)
        return with_reference(steps.write_catalog(self, manifest), self._sparse)

    def publish(self, manifest: Manifest, receipt: object) -> None:
        assert isinstance(receipt, dict)
        steps.write_head(self, manifest, receipt)

    def after_publish(self) -> None:
        """The sparse vectors renormalised where the commit asked for it; a rebuild's readers move to the new physical collection."""
        self._committed_owners = None
        self._sparse = after_head(self, self._sparse)
        if self.physical != self.previous_physical:
            self.fence()
            steps.switch_alias(self)

    def collect(self, keep: list[Manifest]) -> None:
        """Pages removed before the previous generation, and catalogs older than it, are deleted."""
        models = _models()
        generation = self.generation
        try:
            self.client.delete(self.physical, points_selector=models.FilterSelector(filter=_flt(gen_removed=(0, generation - 1))))
            self.client.delete(self.catalog, points_selector=models.FilterSelector(filter=_flt(generation=(0, generation - 2))))
        except Exception:
            pass  # best effort: the next commit tries again
        self.blob_sink().collect(blob_names(keep) | self.txn.staging.blobs)

    def discard(self, keep: list[Manifest]) -> None:
        """Staged points that no commit named: deleted now (a killed writer's are, by the next one)."""
        models = _models()
        # Blobs are named by their content: a writer that took the lease over may have staged the same
        # names (its next HEAD will name them). A writer that lost its lease deletes none; the next
        # commit's collect removes what no generation names.
        if self.physical == self.previous_physical and not _lease_lost(self.lease):
            readable, head = _head_manifest(self.store, self.physical)
            if readable:
                self.blob_sink().delete(self.txn.staging.blobs - blob_names([*keep, head]))
        if not self._staged and not self.txn.staging.wrote:
            return
        try:
            if self.physical != self.previous_physical:
                self.client.delete_collection(self.physical)
                self.client.delete_collection(self.catalog)
            else:  # ours only: after a takeover the points above HEAD may be the new writer's
                self.client.delete(self.physical, points_selector=models.FilterSelector(
                    filter=_flt(gen_written=(self.generation + 1, PENDING), writer=self.token)))
        except Exception:
            pass


def _lease_lost(lease: _Lease | None) -> bool:
    """Whether another writer may hold the lease now (lost, or past its life)."""
    if lease is None:
        return False
    return bool(lease.lost) or lease.store.clock() >= lease.expires


def _head_manifest(store: Any, physical: str) -> tuple[bool, Manifest | None]:
    """(readable, the generation HEAD names now): after a takeover, the new writer's."""
    from .catalog import read_catalog, read_head

    try:
        head = read_head(store, physical)
        return True, (read_catalog(store, physical, head) if head is not None else None)
    except Exception:
        return False, None


class QdrantParts:
    """What a Qdrant store gives begin()'s template (transaction.open_transaction)."""

    def __init__(self, store: Any) -> None:  # a QdrantStore
        self.store = store
        self.physical: str | None = None
        self.lease: _Lease | None = None

    def before_write(self) -> None:
        self.store.writable().physical()  # another tool's collection is refused before anything is created

    @contextmanager
    def hold(self, wait_s: float) -> Iterator[LeaseHold]:
        with hold_lease(self.store, wait_s) as lease:
            self.lease = lease
            self.physical = self.store.physical()
            yield LeaseHold(lease)

    def read_base(self) -> tuple[Manifest | None, int]:
        base = self.store.read_manifest(self.physical) if self.physical else None
        return base, base.generation if base else 0

    def damaged_base(self) -> int:
        return 0  # a rebuild writes a new physical collection anyway

    def backend(self, base: Manifest | None, rebuild: bool, hold: object) -> QdrantBackend:
        return QdrantBackend(self.store, self.physical, base, rebuild, self.lease)

    def pdf_store(self) -> PdfStore | None:
        return self.store.pdfs()



