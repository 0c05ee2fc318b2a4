"""A writer's changes to a Qdrant index: staged points, then commits (see qdrant/store.py's docstring)."""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ...core.errors import IndexProblem
from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..errors import IndexWriteError
from ..manifest import (
    FORMAT,
    REBUILD_HINT,
    Document,
    Failure,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
    Span,
)
from .ids import (
    CHUNK_CHARS,
    HEAD_ID,
    PATHS_VERSION,
    PENDING,
    POOLED,
    UPSERT_BATCH,
    VECTOR,
    LeaseLost,
    _flt,
    _models,
    catalog_of,
    chunk_id,
    path_fields,
    point_id,
)
from .lease import _Lease


class QdrantSegmentWriter:
    """Upserts pages as points in batches; `rows` records whose page each row is."""

    def __init__(self, txn: "QdrantTransaction", dim: int) -> None:
        self.txn, self.dim = txn, dim
        self.id = f"seg-{uuid.uuid4().hex}"
        self.lengths: list[int] = []
        self.owners: list[str] = []
        self._batch: list = []

    @property
    def pages(self) -> int:
        return len(self.lengths)

    def append(self, vectors: np.ndarray, page: PageRef | None = None, visible_from: int = PENDING) -> int:
        if page is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        block = np.asarray(vectors, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self.dim or block.shape[0] < 1:
            raise ValueError(f"a page of shape {block.shape}, expected (tokens >= 1, {self.dim})")
        row = len(self.lengths)
        self._batch.append(self.txn.point(self.id, row, block, page, visible_from))
        self.lengths.append(int(block.shape[0]))
        self.owners.append(page.path)
        if len(self._batch) >= UPSERT_BATCH:
            self.flush()
        if row == 1:
            self.flush()
            failpoint("write-vectors")
        return row

    def flush(self) -> None:
        if self._batch:
            self.txn.upsert(self._batch)
            self._batch = []

    def segment(self) -> Segment:
        return Segment(id=self.id, pages=len(self.lengths), rows=sum(self.lengths), dim=self.dim, storage="qdrant")


class QdrantTransaction:
    """A writer's changes to a Qdrant index; see the module's docstring for what each commit does."""

    def __init__(self, store: Any, physical: str | None, base: Manifest | None, rebuild: bool,  # a QdrantStore
                 lease: _Lease | None = None) -> None:
        self.store = store
        self.lease = lease
        self.base = base
        self.current = base
        self.previous: Manifest | None = None  # the generation before `current` (a slow reader may still be on it)
        self.generation = base.generation if base else 0
        self.pdfs = store.pdfs()
        self.needs_upgrade = False
        self.previous_physical = physical
        self.rebuild = rebuild or physical is None or base is None
        self.physical = f"{store.spec.collection}__{uuid.uuid4().hex[:10]}" if self.rebuild else physical
        self._created = False
        self._segments: dict[str, Segment] = dict(base.segments) if base else {}
        self._owners: dict[str, list[str]] = {}  # staged segment -> the path of each row
        self._staged: set[str] = set()
        self._writers: list[QdrantSegmentWriter] = []
        self._committed_owners: dict[tuple[str, int], str] | None = None
        self.token = lease.token if lease else uuid.uuid4().hex
        self._wrote = False  # points upserted since the last commit (some perhaps in no finished segment)

    @property
    def client(self):
        return self.store.client

    @property
    def catalog(self) -> str:
        return catalog_of(self.physical)

    @contextmanager
    def writing(self) -> Iterator[None]:
        try:
            with self.store.talking("writing"):
                yield
        except LeaseLost:
            raise
        except OSError as exc:  # the PDF store
            raise IndexWriteError(f"could not write to {self.store.location}: {exc.strerror or exc}; "
                                  f"the index keeps generation {self.generation}.") from None
        except IndexProblem as exc:
            if isinstance(exc, IndexWriteError):
                raise
            self.fence()  # a takeover (its recovery deleted what we wrote) is said as such
            raise IndexWriteError(f"{exc.message} The index keeps generation {self.generation}.",
                                  hint="Fix the cause and run the command again: a build carries on from the last commit.") from None

    def fence(self) -> None:
        """Stop (LeaseLost) unless this writer still holds its lease with time to spare."""
        if self.lease is not None:
            self.lease.check()

    # set-up and recovery

    def _ensure_collections(self, dim: int) -> None:
        if self._created:
            return
        models = _models()
        server = self.store.spec.path is None
        with self.writing():
            if not self.client.collection_exists(self.physical):
                self.client.create_collection(self.physical, vectors_config={
                    VECTOR: models.VectorParams(
                        size=dim, distance=models.Distance.DOT, datatype=models.Datatype.FLOAT16,
                        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                        hnsw_config=models.HnswConfigDiff(m=0),  # no graph: MaxSim over every visible page, exact
                        on_disk=server or None,  # a server keeps the big multi-vectors on disk, the pooled ones in RAM
                    ),
                    POOLED: models.VectorParams(size=dim, distance=models.Distance.DOT),
                }, shard_number=self.store.spec.shards, replication_factor=self.store.spec.replicas)
                if self.store.spec.path is None:  # a server filters faster with them; the in-process mode has none
                    for field, schema in (("path", "keyword"), ("sha256", "keyword"), ("visible_from", "integer"),
                                          ("gen_removed", "integer"), ("gen_written", "integer")):
                        self.client.create_payload_index(self.physical, field, field_schema=schema)
            if not self.client.collection_exists(self.catalog):
                self.client.create_collection(self.catalog, vectors_config={})
        self._created = True

    def recover(self) -> None:
        """Undo what a writer killed before its commit left: points and catalog chunks above HEAD's
        generation, pages it made visible or removed, and physical collections of a rebuild that
        never switched the alias."""

        models = _models()
        g = self.generation
        ours = re.compile(rf"^{re.escape(self.store.spec.collection)}__[0-9a-f]{{10}}(__catalog)?$")
        keep = {self.previous_physical, catalog_of(self.previous_physical)} if self.previous_physical else set()
        if self.pdfs is not None:
            self.pdfs.sweep_temporary()
        with self.writing():
            for name in [c.name for c in self.client.get_collections().collections]:
                if ours.match(name) and name not in keep and self.store.ours_shaped(name):
                    self.client.delete_collection(name)
            if self.previous_physical is None or self.base is None:
                return
            physical = self.previous_physical
            self._claim_head(physical)
            self.client.delete(physical, points_selector=models.FilterSelector(filter=_flt(gen_written=(g + 1, PENDING))))
            self.client.set_payload(physical, {"visible_from": PENDING}, points=_flt(visible_from=(g + 1, PENDING - 1)))
            self.client.delete_payload(physical, keys=["gen_removed"], points=_flt(gen_removed=(g + 1, PENDING)))
            self.client.delete(catalog_of(physical), points_selector=models.FilterSelector(
                filter=_flt(generation=(g + 1, PENDING))))
            if self.store.legacy_paths and not self.rebuild:
                self._upgrade_paths()
            if self.store.head_format != FORMAT and not self.rebuild:
                self.needs_upgrade = True  # an older catalog (migrated on read): the next commit writes the current format
        self._created = not self.rebuild

    def _claim_head(self, physical: str) -> None:
        """HEAD names this writer: a writer that lost its lease can no longer replace it (see _write_head)."""
        models = _models()
        self.client.set_payload(catalog_of(physical), {"writer": self.token},
                                points=models.PointIdsList(points=[HEAD_ID]), wait=True)

    def _upgrade_paths(self) -> None:
        """A collection from before path_raw: its pages of paths that are not UTF-8 get it; the
        commit that follows marks HEAD, and from then on they are read by their exact bytes."""
        models = _models()
        for doc in [*self.base.documents, *self.base.in_progress]:
            fields = path_fields(doc.path)
            if "path_raw" in fields:
                ids = [point_id(seg, row) for seg, row in self._rows(doc)]
                self.client.set_payload(self.previous_physical, fields, points=models.PointIdsList(points=ids), wait=True)
        self.needs_upgrade = True

    # staging

    def point(self, segment: str, row: int, block: np.ndarray, page: PageRef, visible_from: int):
        models = _models()
        pooled = block.mean(axis=0)
        pooled = pooled / (np.linalg.norm(pooled) or 1.0)
        payload = {**path_fields(page.path), "page": page.page, "sha256": page.sha256, "kind": page.kind,
                   "metadata": dict(page.metadata), "segment": segment, "row": row,
                   "gen_written": self.generation + 1, "visible_from": visible_from, "writer": self.token}
        return models.PointStruct(id=point_id(segment, row), vector={VECTOR: block, POOLED: pooled}, payload=payload)

    def upsert(self, points: list) -> None:
        failpoint("upsert")
        self.fence()
        self._wrote = True
        with self.writing():
            for attempt in range(4):
                try:
                    self.client.upsert(self.physical, points, wait=True)
                    break
                except Exception:
                    if attempt == 3:
                        raise
                    time.sleep(0.5 * 2 ** attempt)  # a transient error of a server: retried

    def segment_writer(self, dim: int) -> QdrantSegmentWriter:
        self._ensure_collections(dim)
        writer = QdrantSegmentWriter(self, dim)
        self._writers.append(writer)
        return writer

    def finish_segment(self, writer: QdrantSegmentWriter) -> Segment | None:
        self._writers.remove(writer)
        if not writer.pages:
            return None
        writer.flush()
        segment = writer.segment()
        self._segments[segment.id] = segment
        self._owners[segment.id] = list(writer.owners)
        self._staged.add(segment.id)
        return segment

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment:
        if refs is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        writer = self.segment_writer(dim)
        for page, ref in zip(pages, refs):
            writer.append(page, ref)
        segment = self.finish_segment(writer)
        if segment is None:
            raise ValueError("a segment needs at least one page")
        return segment

    def store_pdf(self, pdf: Path) -> tuple[str, str] | None:
        """A converted PDF into the PDF store, named by its own sha256 (None without a PDF store)."""
        if self.pdfs is None:
            return None
        with self.writing():
            return self.pdfs.put(pdf)

    def pdf_path(self, rel: str) -> Path:
        return self.store.pdf_file(rel)

    # commit

    def commit(self, documents: Sequence[Document], model: ModelInfo, settings: Settings,
               failures: Sequence[Failure] = (), in_progress: Sequence[Document] = ()) -> Manifest:
        """A new generation of exactly these documents: pages of other paths copied, complete
        documents made visible, pages no document names any more removed, the catalog written,
        then HEAD replaced (and for a rebuild, the alias switched)."""
        self._ensure_collections(model.dim or settings.dim or 128)
        following = self.generation + 1
        with self.writing():
            documents = [self._owned(d, following) for d in documents]
            in_progress = [self._owned(d, PENDING) for d in in_progress]
            failpoint("write-vectors")
            failpoint("before-switch")
            self.fence()  # nothing of the commit's switch is written by a writer that lost its lease
            self._show(documents, following)
            self._remove_unnamed(documents, in_progress, following)
            live = {s.segment for d in [*documents, *in_progress] for s in d.spans}
            manifest = Manifest.model_construct(
                generation=following, created=time.time(), model=model, settings=settings,
                segments={sid: self._segments[sid] for sid in sorted(live)},
                documents=sorted(documents, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                in_progress=sorted(in_progress, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                failures=list(failures),
            )
            manifest._references_resolve()
            self.fence()
            self._write_catalog(manifest)
            failpoint("before-head")
            self.fence()
            self._write_head(manifest)
            failpoint("after-head")
            if self.physical != self.previous_physical:
                self.fence()
                self._switch_alias()
        self.previous, self.current, self.generation, self._committed_owners = self.current, manifest, following, None
        self._staged -= live
        self._wrote = bool(self._staged)
        self._collect(following)
        if self.pdfs is not None:
            self.pdfs.committed(manifest)
            self.pdfs.collect([manifest, self.previous])
        return manifest

    def _rows(self, doc: Document) -> list[tuple[str, int]]:
        return [(s.segment, r) for s in doc.spans for r in range(s.first, s.first + s.pages)]

    def _owner_map(self) -> dict[tuple[str, int], str]:
        """Whose page each committed point is (from the previous generation's catalog)."""
        if self._committed_owners is None:
            owners = {}
            for doc in ([*self.current.documents, *self.current.in_progress] if self.current else []):
                for key in self._rows(doc):
                    owners[key] = doc.path
            self._committed_owners = owners
        return self._committed_owners

    def _owner(self, segment: str, row: int) -> tuple[str | None, str]:
        """(path, collection) of the point at (segment, row)."""
        if segment in self._owners:
            return self._owners[segment][row], self.physical
        return self._owner_map().get((segment, row)), self.previous_physical

    def _owned(self, doc: Document, visible_from: int) -> Document:
        """The document with points of its own in the collection being written: pages stored under
        another path (a renamed or duplicated file reuses vectors), or in the collection a rebuild
        replaces, are copied."""
        rows = self._rows(doc)
        owners = [self._owner(seg, row) for seg, row in rows]
        if all(path == doc.path and where == self.physical for path, where in owners):
            self._retag(doc)
            return doc
        fetched: dict[str, np.ndarray] = {}
        by_collection: dict[str, list[str]] = {}
        for (seg, row), (_, where) in zip(rows, owners):
            by_collection.setdefault(where, []).append(point_id(seg, row))
        for where, ids in by_collection.items():
            for start in range(0, len(ids), 64):
                for record in self.client.retrieve(where, ids[start : start + 64], with_vectors=[VECTOR]):
                    fetched[str(record.id)] = np.asarray(record.vector[VECTOR], dtype=np.float32)
        ids = [point_id(seg, row) for seg, row in rows]
        missing = [n for n, pid in enumerate(ids, 1) if pid not in fetched]
        if missing:
            raise IndexProblem(f"{doc.path}: page {missing[0]} of the vectors it reuses is missing.", hint=REBUILD_HINT)
        writer = QdrantSegmentWriter(self, fetched[ids[0]].shape[1])
        for number, pid in enumerate(ids, 1):
            writer.append(fetched[pid], PageRef(doc.path, number, doc.sha256, doc.kind, doc.metadata), visible_from=PENDING)
        writer.flush()
        segment = writer.segment()
        self._segments[segment.id] = segment
        self._owners[segment.id] = list(writer.owners)
        self._staged.add(segment.id)
        return doc.model_copy(update={"spans": [Span(segment=segment.id, first=0, pages=len(ids))]})

    def _retag(self, doc: Document) -> None:
        """New metadata for a document already stored: its points' payload follows (in place)."""
        old = next((d for d in (self.current.documents if self.current else []) if d.path == doc.path), None)
        if old is not None and old.metadata != doc.metadata and old.spans == doc.spans:
            models = _models()
            ids = [point_id(seg, row) for seg, row in self._rows(doc)]
            self.client.set_payload(self.physical, {"metadata": dict(doc.metadata)}, points=models.PointIdsList(points=ids))

    def _show(self, documents: list[Document], generation: int) -> None:
        """Pages of complete documents that were waiting (PENDING) become visible from `generation`."""
        models = _models()
        previous = {d.path: d for d in (self.current.documents if self.current else [])}
        ids = [point_id(seg, row) for d in documents if previous.get(d.path) != d for seg, row in self._rows(d)]
        for start in range(0, len(ids), 1024):
            self.fence()
            self.client.set_payload(self.physical, {"visible_from": generation}, points=models.Filter(must=[
                models.HasIdCondition(has_id=ids[start : start + 1024]),
                models.FieldCondition(key="visible_from", match=models.MatchValue(value=PENDING))]))

    def _remove_unnamed(self, documents: list[Document], in_progress: list[Document], generation: int) -> None:
        """Pages the previous generation named and this one does not: removed from `generation`."""
        if self.current is None or self.physical != self.previous_physical:
            return
        models = _models()
        live = {key for d in [*documents, *in_progress] for key in self._rows(d)}
        gone = [point_id(seg, row) for d in [*self.current.documents, *self.current.in_progress]
                for seg, row in self._rows(d) if (seg, row) not in live]
        for start in range(0, len(gone), 1024):
            self.fence()
            self.client.set_payload(self.physical, {"gen_removed": generation}, points=models.PointIdsList(points=gone[start : start + 1024]))

    def _write_catalog(self, manifest: Manifest) -> None:
        models = _models()
        text = manifest.to_json().decode("ascii")
        chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
        points = [models.PointStruct(id=chunk_id(manifest.generation, i, self.token), vector={},
                                     payload={"kind": "manifest", "generation": manifest.generation, "chunk": i, "data": chunk})
                  for i, chunk in enumerate(chunks)]
        self.client.upsert(self.catalog, points, wait=True)
        self._head_payload = {"kind": "head", "format": FORMAT, "generation": manifest.generation, "chunks": len(chunks),
                              "sha256": hashlib.sha256(text.encode()).hexdigest(), "physical": self.physical,
                              "paths": PATHS_VERSION, "writer": self.token, "chunk_key": self.token}

    def _write_head(self, manifest: Manifest) -> None:
        """HEAD replaced only where it still names this writer (claimed when the lease was taken): a
        writer whose lease was taken over cannot commit, whatever its clock says."""
        models = _models()
        mine = models.Filter(must=[models.FieldCondition(key="writer", match=models.MatchValue(value=self.token))])
        self.client.upsert(self.catalog, [models.PointStruct(id=HEAD_ID, vector={}, payload=self._head_payload)],
                           update_filter=mine, wait=True)
        found = self.client.retrieve(self.catalog, [HEAD_ID], with_payload=True)
        if not found or found[0].payload.get("writer") != self.token or found[0].payload.get("generation") != manifest.generation:
            if self.lease is not None:
                self.lease.lost = "another writer took over its lease and HEAD"
            self.fence()

    def _switch_alias(self) -> None:
        """Readers move to the new physical collection in one step; the old one is dropped after."""
        models = _models()
        operations = []
        if self.previous_physical is not None:
            operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.store.spec.collection)))
        operations.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=self.physical, alias_name=self.store.spec.collection)))
        self.client.update_collection_aliases(change_aliases_operations=operations)
        old = self.previous_physical
        self.previous_physical = self.physical
        if old is not None:
            for name in (old, catalog_of(old)):
                try:
                    self.client.delete_collection(name)
                except Exception:
                    pass  # collected by the next writer's recovery

    def _collect(self, generation: int) -> None:
        """Pages removed before the previous generation, and catalogs older than it, are deleted."""
        models = _models()
        try:
            self.client.delete(self.physical, points_selector=models.FilterSelector(filter=_flt(gen_removed=(0, generation - 1))))
            self.client.delete(self.catalog, points_selector=models.FilterSelector(filter=_flt(generation=(0, generation - 2))))
        except Exception:
            pass  # best effort: the next commit tries again

    def discard_staged(self) -> None:
        """Staged points that no commit named: deleted now (a killed writer's are, by the next one)."""
        models = _models()
        self._writers.clear()
        if self.pdfs is not None:
            self.pdfs.discard([self.current, self.previous])
        if not self._staged and not self._wrote:
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
        self._staged.clear()
