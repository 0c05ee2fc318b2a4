"""The switch of a Qdrant commit, step by step: pages of other paths copied (`owned`), complete
documents made visible (`show`), pages no document names removed, the catalog and HEAD written,
and a rebuild's alias switched: the steps of the Qdrant backend (qdrant/txn.py), in their order."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ...core.errors import IndexProblem
from ...core.types import PageRef
from ..format.manifest import (
    FORMAT,
    REBUILD_HINT,
    Document,
    Manifest,
    Span,
)
from .ids import (
    CHUNK_CHARS,
    HEAD_ID,
    PATHS_VERSION,
    PENDING,
    VECTOR,
    _models,
    catalog_of,
    chunk_id,
    point_id,
)


def doc_rows(txn: Any, doc: Document) -> list[tuple[str, int]]:
    return [(s.segment, r) for s in doc.spans for r in range(s.first, s.first + s.pages)]


def owner_map(txn: Any) -> dict[tuple[str, int], str]:
    """Whose page each committed point is (from the previous generation's catalog)."""
    if txn._committed_owners is None:
        owners = {}
        for doc in ([*txn.current.documents, *txn.current.in_progress] if txn.current else []):
            for key in doc_rows(txn, doc):
                owners[key] = doc.path
        txn._committed_owners = owners
    return txn._committed_owners


def owner(txn: Any, segment: str, row: int) -> tuple[str | None, str]:
    """(path, collection) of the point at (segment, row)."""
    if segment in txn._owners:
        return txn._owners[segment][row], txn.physical
    return owner_map(txn).get((segment, row)), txn.previous_physical


def owned(txn: Any, doc: Document, visible_from: int) -> Document:
    """The document with points of its own in the collection being written: pages stored under
    another path (a renamed or duplicated file reuses vectors), or in the collection a rebuild
    replaces, are copied."""
    rows = doc_rows(txn, doc)
    owners = [owner(txn, seg, row) for seg, row in rows]
    if all(path == doc.path and where == txn.physical for path, where in owners):
        retag(txn, doc)
        return doc
    fetched: dict[str, np.ndarray] = {}
    by_collection: dict[str, list[str]] = {}
    for (seg, row), (_, where) in zip(rows, owners):
        by_collection.setdefault(where, []).append(point_id(seg, row))
    for where, ids in by_collection.items():
        for start in range(0, len(ids), 64):
            for record in txn.client.retrieve(where, ids[start : start + 64], with_vectors=[VECTOR]):
                fetched[str(record.id)] = np.asarray(record.vector[VECTOR], dtype=np.float32)
    ids = [point_id(seg, row) for seg, row in rows]
    missing = [n for n, pid in enumerate(ids, 1) if pid not in fetched]
    if missing:
        raise IndexProblem(f"{doc.path}: page {missing[0]} of the vectors it reuses is missing.", hint=REBUILD_HINT)
    texts = _page_extras(txn, doc)
    writer = txn.txn.segment_writer(fetched[ids[0]].shape[1])  # with the artifacts' parts: the page text travels
    for number, pid in enumerate(ids, 1):
        writer.append(fetched[pid], PageRef(doc.path, number, doc.sha256, doc.kind, doc.metadata), texts[number - 1])
    segment = txn.txn.finish_segment(writer)
    assert segment is not None  # it received every page
    return doc.model_copy(update={"spans": [Span(segment=segment.id, first=0, pages=len(ids))]})


def _page_extras(txn: Any, doc: Document) -> list[dict[str, str] | None]:
    """Each page's {"text", "text_source"} from the text parts of the segments it is stored in (None: no text part)."""
    from ..text.artifact import page_texts

    known = {**(txn.base.segments if txn.base else {}), **(txn.current.segments if txn.current else {}), **txn._segments}
    return [{"text": found[0], "text_source": found[1]} if found else None
            for found in page_texts(known, doc, txn.base_blobs())]


def retag(txn: Any, doc: Document) -> None:
    """New metadata for a document already stored: its points' payload follows (in place)."""
    old = next((d for d in (txn.current.documents if txn.current else []) if d.path == doc.path), None)
    if old is not None and old.metadata != doc.metadata and old.spans == doc.spans:
        models = _models()
        ids = [point_id(seg, row) for seg, row in doc_rows(txn, doc)]
        txn.client.set_payload(txn.physical, {"metadata": dict(doc.metadata)}, points=models.PointIdsList(points=ids))


def show(txn: Any, documents: list[Document], generation: int) -> None:
    """Pages of complete documents that were waiting (PENDING) become visible from `generation`."""
    models = _models()
    previous = {d.path: d for d in (txn.current.documents if txn.current else [])}
    ids = [point_id(seg, row) for d in documents if previous.get(d.path) != d for seg, row in doc_rows(txn, d)]
    for start in range(0, len(ids), 1024):
        txn.fence()
        txn.client.set_payload(txn.physical, {"visible_from": generation}, points=models.Filter(must=[
            models.HasIdCondition(has_id=ids[start : start + 1024]),
            models.FieldCondition(key="visible_from", match=models.MatchValue(value=PENDING))]))


def remove_unnamed(txn: Any, documents: list[Document], in_progress: list[Document], generation: int) -> None:
    """Pages the previous generation named and this one does not: removed from `generation`."""
    if txn.current is None or txn.physical != txn.previous_physical:
        return
    models = _models()
    live = {key for d in [*documents, *in_progress] for key in doc_rows(txn, d)}
    gone = [point_id(seg, row) for d in [*txn.current.documents, *txn.current.in_progress]
            for seg, row in doc_rows(txn, d) if (seg, row) not in live]
    for start in range(0, len(gone), 1024):
        txn.fence()
        txn.client.set_payload(txn.physical, {"gen_removed": generation}, points=models.PointIdsList(points=gone[start : start + 1024]))


def write_catalog(txn: Any, manifest: Manifest) -> dict:
    """The manifest in chunks keyed by (generation, chunk, writer token); returns the HEAD payload naming them."""
    models = _models()
    text = manifest.to_json().decode("ascii")
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
    points = [models.PointStruct(id=chunk_id(manifest.generation, i, txn.token), vector={},
                                 payload={"kind": "manifest", "generation": manifest.generation, "chunk": i, "data": chunk})
              for i, chunk in enumerate(chunks)]
    txn.client.upsert(txn.catalog, points, wait=True)
    return {"kind": "head", "format": FORMAT, "generation": manifest.generation, "chunks": len(chunks),
            "sha256": hashlib.sha256(text.encode()).hexdigest(), "physical": txn.physical,
            "paths": PATHS_VERSION, "writer": txn.token, "chunk_key": txn.token}


def write_head(txn: Any, manifest: Manifest, payload: dict) -> None:
    """HEAD replaced only where it still names this writer (claimed when the lease was taken): a
    writer whose lease was taken over cannot commit, whatever its clock says."""
    models = _models()
    mine = models.Filter(must=[models.FieldCondition(key="writer", match=models.MatchValue(value=txn.token))])
    txn.client.upsert(txn.catalog, [models.PointStruct(id=HEAD_ID, vector={}, payload=payload)],
                       update_filter=mine, wait=True)
    found = txn.client.retrieve(txn.catalog, [HEAD_ID], with_payload=True)
    if not found or found[0].payload.get("writer") != txn.token or found[0].payload.get("generation") != manifest.generation:
        if txn.lease is not None:
            txn.lease.lost = "another writer took over its lease and HEAD"
        txn.fence()


def switch_alias(txn: Any) -> None:
    """Readers move to the new physical collection in one step; the old one is dropped after."""
    models = _models()
    operations = []
    if txn.previous_physical is not None:
        operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=txn.store.spec.collection)))
    operations.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
        collection_name=txn.physical, alias_name=txn.store.spec.collection)))
    txn.client.update_collection_aliases(change_aliases_operations=operations)
    old = txn.previous_physical
    txn.previous_physical = txn.physical
    if old is not None:
        for name in (old, catalog_of(old)):
            try:
                txn.client.delete_collection(name)
            except Exception:
                pass  # collected by the next writer's recovery
