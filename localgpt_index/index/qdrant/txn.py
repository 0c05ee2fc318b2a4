"""The Qdrant backend of the transaction: rows staged as PENDING points, generations published by HEAD.

A generation is published by copying/showing/removing points, writing catalog chunks and replacing HEAD by compare-and-swap
(then, for a rebuild, switching the alias); see qdrant/store.py's docstring for the scheme. Under
its lease a writer first creates the collections it lacks and undoes what a killed writer left
(points and catalog chunks above HEAD, stray physical collections).

A Qdrant store writes no "codes" parts (`QdrantBackend.unused_artifacts`): its first pass is Qdrant's own
binary quantization, so they would be blobs no reader uses. Segments of older collections keep theirs:
their manifests still name them, so verify checks them and collection keeps them until no kept generation does."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import IndexProblem, IndexWriteError
from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..artifacts import blob_names
from ..format.manifest import FORMAT, REBUILD_HINT, Document, Manifest, Segment, Span
from ..format.pdfstore import PdfStore
from ..transaction import SegmentSink, Transaction, kept
from .blobs import QdrantBlobs
from .catalog import check_count
from .ids import (
    CHUNK_CHARS,
    HEAD_ID,
    PATHS_VERSION,
    PENDING,
    POOLED,
    VECTOR,
    LeaseLost,
    _flt,
    _models,
    catalog_of,
    chunk_id,
    path_fields,
    point_id,
)
from .lease import _Lease, hold_lease
from .quantization import add_quantization, binary_quantization
from .sparse import SparseCommit, after_head, sparse_config, with_reference, write_vectors
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
    """What only Qdrant does in a transaction; the rest is `Transaction`'s. Its point sink
    (writer.py) and the sparse vectors (sparse.py) take this object as their `txn`."""

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

    # what the point sink and the sparse vectors read of the transaction

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

    def mark_written(self) -> None:
        self.txn.staging.wrote = True

    def record_owners(self, segment: str, paths: list[str]) -> None:
        self._owners[segment] = paths

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
            self._claim_head(physical)
            self.client.delete(physical, points_selector=models.FilterSelector(filter=_flt(gen_written=(g + 1, PENDING))))
            self.client.set_payload(physical, {"visible_from": PENDING}, points=_flt(visible_from=(g + 1, PENDING - 1)))
            self.client.delete_payload(physical, keys=["gen_removed"], points=_flt(gen_removed=(g + 1, PENDING)))
            self.client.delete(catalog_of(physical), points_selector=models.FilterSelector(
                filter=_flt(generation=(g + 1, PENDING))))
            paths = self.store.legacy_paths and not self.rebuild
            if paths:
                self._upgrade_paths()
            if not self.rebuild:  # a rebuild creates its collection with binary quantization
                add_quantization(self.client, physical)
            upgrade = paths or (self.store.head_format != FORMAT and not self.rebuild)
        self._created = not self.rebuild
        return upgrade

    def _claim_head(self, physical: str) -> None:
        """HEAD names this writer: a writer that lost its lease can no longer replace it (see _write_head)."""
        models = _models()
        self.client.set_payload(catalog_of(physical), {"writer": self.token}, points=models.PointIdsList(points=[HEAD_ID]), wait=True)

    def _upgrade_paths(self) -> None:
        """A collection from before path_raw: its pages of paths that are not UTF-8 get it; the
        commit that follows marks HEAD, and from then on they are read by their exact bytes."""
        models = _models()
        assert self.base is not None
        for doc in [*self.base.documents, *self.base.in_progress]:
            fields = path_fields(doc.path)
            if "path_raw" in fields:
                ids = [point_id(seg, row) for seg, row in _doc_rows(doc)]
                self.client.set_payload(self.previous_physical, fields, points=models.PointIdsList(points=ids), wait=True)

    def _ensure_collections(self, dim: int) -> None:
        if self._created:
            return
        models = _models()
        spec = self.store.spec
        with self.writing():
            if not self.client.collection_exists(self.physical):
                self.client.create_collection(self.physical, vectors_config={
                    VECTOR: models.VectorParams(
                        size=dim, distance=models.Distance.DOT, datatype=models.Datatype.FLOAT16,
                        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                        hnsw_config=models.HnswConfigDiff(m=0),  # no graph: MaxSim over every visible page, exact
                        on_disk=spec.path is None or None,  # a server keeps the big multi-vectors on disk, the pooled ones in RAM
                        quantization_config=binary_quantization(),  # their 1-bit codes in RAM: --first-pass (quantization.py)
                    ),
                    POOLED: models.VectorParams(size=dim, distance=models.Distance.DOT),
                }, sparse_vectors_config=sparse_config(), shard_number=spec.shards, replication_factor=spec.replicas)
                if spec.path is None:  # a server filters faster with them; the in-process mode has none
                    for field, schema in (("path", "keyword"), ("sha256", "keyword"), ("visible_from", "integer"),
                                          ("gen_removed", "integer"), ("gen_written", "integer")):
                        self.client.create_payload_index(self.physical, field, field_schema=schema)
            if not self.client.collection_exists(self.catalog):
                self.client.create_collection(self.catalog, vectors_config={})
        self._created = True

    def sink(self, dim: int) -> SegmentSink:
        self._ensure_collections(dim)
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
        self._ensure_collections(dim)
        documents = [self._owned(d) for d in documents]
        in_progress = [self._owned(d) for d in in_progress]
        failpoint("write-vectors")
        failpoint("before-switch")
        self.fence()  # nothing of the commit's switch is written by a writer that lost its lease
        self._show(documents, generation)
        self._remove_unnamed(documents, in_progress, generation)
        return documents, in_progress

    def _owner_map(self) -> dict[tuple[str, int], str]:
        """Whose page each committed point is (from the previous generation's catalog)."""
        if self._committed_owners is None:
            current = self.current
            self._committed_owners = {key: doc.path for doc in ([*current.documents, *current.in_progress] if current else [])
                                      for key in _doc_rows(doc)}
        return self._committed_owners

    def _owner(self, segment: str, row: int) -> tuple[str | None, str | None]:
        """(path, collection) of the point at (segment, row)."""
        if segment in self._owners:
            return self._owners[segment][row], self.physical
        return self._owner_map().get((segment, row)), self.previous_physical

    def _owned(self, doc: Document) -> Document:
        """The document with points of its own in the collection being written: pages stored under
        another path (a renamed or duplicated file reuses vectors), or in the collection a rebuild
        replaces, are copied."""
        rows = _doc_rows(doc)
        owners = [self._owner(seg, row) for seg, row in rows]
        if all(path == doc.path and where == self.physical for path, where in owners):
            self._retag(doc)
            return doc
        by_collection: dict[str, list[str]] = {}
        for (seg, row), (_, where) in zip(rows, owners):
            assert where is not None  # a point of no collection is one the manifest does not name
            by_collection.setdefault(where, []).append(point_id(seg, row))
        fetched: dict[str, np.ndarray] = {}
        for where, ids in by_collection.items():
            for start in range(0, len(ids), 64):
                for record in self.client.retrieve(where, ids[start : start + 64], with_vectors=[VECTOR]):
                    fetched[str(record.id)] = np.asarray(record.vector[VECTOR], dtype=np.float32)
        ids = [point_id(seg, row) for seg, row in rows]
        missing = [n for n, pid in enumerate(ids, 1) if pid not in fetched]
        if missing:
            raise IndexProblem(f"{doc.path}: page {missing[0]} of the vectors it reuses is missing.", hint=REBUILD_HINT)
        texts = self._page_extras(doc)
        writer = self.txn.segment_writer(fetched[ids[0]].shape[1])  # with the artifacts' parts: the page text travels
        for number, pid in enumerate(ids, 1):
            writer.append(fetched[pid], PageRef(doc.path, number, doc.sha256, doc.kind, doc.metadata), texts[number - 1])
        segment = self.txn.finish_segment(writer)
        assert segment is not None  # it received every page
        return doc.model_copy(update={"spans": [Span(segment=segment.id, first=0, pages=len(ids))]})

    def _page_extras(self, doc: Document) -> list[dict[str, object] | None]:
        """Each page's {"text", "text_source", "words"} from the text and words parts of the segments it is stored in
        (None: no text part)."""
        from ..text.artifact import page_texts
        from ..text.words import document_words

        known = {**(self.base.segments if self.base else {}), **(self.current.segments if self.current else {}),
                 **self.txn.staging.segments}
        words = document_words(known, doc, self.base_blobs())
        return [{"text": found[0], "text_source": found[1], "words": placed} if found else None
                for found, placed in zip(page_texts(known, doc, self.base_blobs()), words)]

    def _retag(self, doc: Document) -> None:
        """New metadata for a document already stored: its points' payload follows (in place)."""
        old = next((d for d in (self.current.documents if self.current else []) if d.path == doc.path), None)
        if old is not None and old.metadata != doc.metadata and old.spans == doc.spans:
            models = _models()
            ids = [point_id(seg, row) for seg, row in _doc_rows(doc)]
            self.client.set_payload(self.physical, {"metadata": dict(doc.metadata)}, points=models.PointIdsList(points=ids))

    def _show(self, documents: list[Document], generation: int) -> None:
        """Pages of complete documents that were waiting (PENDING) become visible from `generation`."""
        models = _models()
        previous = {d.path: d for d in (self.current.documents if self.current else [])}
        ids = [point_id(seg, row) for d in documents if previous.get(d.path) != d for seg, row in _doc_rows(d)]
        for start in range(0, len(ids), 1024):
            self.fence()
            self.client.set_payload(self.physical, {"visible_from": generation}, points=models.Filter(must=[
                models.HasIdCondition(has_id=ids[start : start + 1024]),
                models.FieldCondition(key="visible_from", match=models.MatchValue(value=PENDING))]))

    def _remove_unnamed(self, documents: list[Document], in_progress: list[Document], generation: int) -> None:
        """Pages the previous generation named and this one does not: removed from `generation`."""
        current = self.current
        if current is None or self.physical != self.previous_physical:
            return
        models = _models()
        live = {key for d in [*documents, *in_progress] for key in _doc_rows(d)}
        gone = [point_id(seg, row) for d in [*current.documents, *current.in_progress] for seg, row in _doc_rows(d)
                if (seg, row) not in live]
        for start in range(0, len(gone), 1024):
            self.fence()
            self.client.set_payload(self.physical, {"gen_removed": generation},
                                    points=models.PointIdsList(points=gone[start : start + 1024]))

    def segment_record(self, segment: Segment) -> Segment:
        return segment

    def write_catalog(self, manifest: Manifest) -> object:
        """The sparse vectors of the new pages, then the manifest in chunks keyed by (generation, chunk,
        writer token); returns the HEAD payload naming them."""
        self._sparse = write_vectors(self, manifest, self.current, self.physical != self.previous_physical and self.current is self.base)
        models = _models()
        text = manifest.to_json().decode("ascii")
        chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
        points = [models.PointStruct(id=chunk_id(manifest.generation, i, self.token), vector={},
                                     payload={"kind": "manifest", "generation": manifest.generation, "chunk": i, "data": chunk})
                  for i, chunk in enumerate(chunks)]
        self.client.upsert(self.catalog, points, wait=True)
        head = {"kind": "head", "format": FORMAT, "generation": manifest.generation, "chunks": len(chunks),
                "sha256": hashlib.sha256(text.encode()).hexdigest(), "physical": self.physical,
                "paths": PATHS_VERSION, "writer": self.token, "chunk_key": self.token}
        return with_reference(head, self._sparse)

    def publish(self, manifest: Manifest, receipt: object) -> None:
        """HEAD replaced only where it still names this writer (claimed when the lease was taken): a
        writer whose lease was taken over cannot commit, whatever its clock says."""
        assert isinstance(receipt, dict)
        models = _models()
        mine = models.Filter(must=[models.FieldCondition(key="writer", match=models.MatchValue(value=self.token))])
        self.client.upsert(self.catalog, [models.PointStruct(id=HEAD_ID, vector={}, payload=receipt)], update_filter=mine, wait=True)
        found = self.client.retrieve(self.catalog, [HEAD_ID], with_payload=True)
        if not found or found[0].payload.get("writer") != self.token or found[0].payload.get("generation") != manifest.generation:
            if self.lease is not None:
                self.lease.lost = "another writer took over its lease and HEAD"
            self.fence()

    def after_publish(self) -> None:
        """The sparse vectors renormalised where the commit asked for it; a rebuild's readers move to the new physical collection."""
        self._committed_owners = None
        self._sparse = after_head(self, self._sparse)
        if self.physical != self.previous_physical:
            self.fence()
            self._switch_alias()

    def _switch_alias(self) -> None:
        """Readers move to the new physical collection in one step; the old one is dropped after."""
        models = _models()
        operations = []
        if self.previous_physical is not None:
            operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.store.spec.collection)))
        operations.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=self.physical, alias_name=self.store.spec.collection)))
        self.client.update_collection_aliases(change_aliases_operations=operations)
        old, self.previous_physical = self.previous_physical, self.physical
        if old is not None:
            for name in (old, catalog_of(old)):
                try:
                    self.client.delete_collection(name)
                except Exception:
                    pass  # collected by the next writer's recovery

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
        if not self.txn.staging.staged and not self.txn.staging.wrote:
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


def _doc_rows(doc: Document) -> list[tuple[str, int]]:
    """(segment, row) of each of a document's pages."""
    return [(s.segment, r) for s in doc.spans for r in range(s.first, s.first + s.pages)]


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
        if not self.physical:
            return None, 0
        base = self.store.read_manifest(self.physical)
        if base is not None:  # points deleted behind the index's back: damage here too, as for a reader
            check_count(self.store, self.physical, base)
        return base, base.generation if base else 0

    def damaged_base(self) -> int:
        return 0  # a rebuild writes a new physical collection anyway

    def recorded_base(self) -> Manifest | None:
        try:
            return self.store.read_manifest(self.physical) if self.physical else None
        except IndexProblem:
            return None

    def backend(self, base: Manifest | None, rebuild: bool, hold: object) -> QdrantBackend:
        return QdrantBackend(self.store, self.physical, base, rebuild, self.lease)

    def pdf_store(self) -> PdfStore | None:
        return self.store.pdfs()



