"""A read-only view of one committed generation in Qdrant."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.errors import IndexProblem
from ..manifest import (
    REBUILD_HINT,
    Document,
    Manifest,
)
from ..artifacts import BlobSource
from ..codes.plan import ScoringPath
from ..view import GenerationView
from ..text.engine import TextHit
from .blobs import QdrantBlobs
from .sparse import SPARSE, avgdl_of, has_sparse, idf_scope, query_vector
from .ids import (
    POOLED,
    VECTOR,
    _models,
    doc_key,
    point_id,
    point_key,
    visible_filter,
)


class QdrantView(GenerationView):
    """A read-only view of one committed generation in Qdrant: the catalog from the catalog
    collection, pages ranked by Qdrant's exact MaxSim over the points visible to it (no local
    scoring state: the shared parts are GenerationView's, index/view.py)."""

    def __init__(self, store: Any, manifest: Manifest, physical: str, legacy_paths: bool = False) -> None:  # a QdrantStore
        super().__init__(store, manifest)
        self.physical = physical
        self.legacy_paths = legacy_paths
        self._sparse: bool | None = None
        self._paths = {doc_key(d.path, legacy_paths): d.path for d in manifest.documents}

    def _blob_source(self) -> BlobSource:
        return QdrantBlobs(self.store, self.store.catalog_of(self.physical))

    def scoring_path(self, candidates: int | str | None) -> ScoringPath:
        """Qdrant ranks the pages itself, whatever `candidates` asks (a number: its pooled-vector prefetch)."""
        return ScoringPath("store", candidates if isinstance(candidates, int) else None, "the store ranks the pages")

    def search_vectors(self, query_vectors, k: int, device: str = "cpu", filters=None, candidates=None):
        """Top-k pages per query; ties go to the earlier path, then the earlier page, as locally.
        With `candidates`, Qdrant first takes that many pages by the pooled vector (lossy)."""
        from ...core.types import SearchHit

        models = _models()
        if not len(query_vectors):
            return []
        flt = visible_filter(self.manifest.generation, filters)
        requests = []
        for query in query_vectors:
            query = np.asarray(query, dtype=np.float32)
            prefetch = None
            if candidates:
                pooled = query.mean(axis=0)
                prefetch = models.Prefetch(query=(pooled / (np.linalg.norm(pooled) or 1.0)).tolist(), using=POOLED,
                                           filter=flt, limit=candidates)
            requests.append(models.QueryRequest(query=query.tolist(), using=VECTOR, filter=flt, prefetch=prefetch,
                                                limit=k + 16, with_payload=["path", "path_raw", "page", "sha256", "kind", "metadata"]))
        with self.store.talking("querying"):
            answers = self.store.client.query_batch_points(self.physical, requests)
        results = []
        for answer in answers:
            named = [(self._paths.get(point_key(p.payload, self.legacy_paths)), p) for p in answer.points]
            points = [(path, p) for path, p in named if path is not None]
            points.sort(key=lambda hit: (-hit[1].score, hit[0].encode("utf-8", "surrogateescape"), hit[1].payload["page"]))
            results.append([
                SearchHit(rank, float(p.score), path, int(p.payload["page"]), p.payload["sha256"],
                          p.payload["kind"], {str(k): str(v) for k, v in (p.payload.get("metadata") or {}).items()})
                for rank, (path, p) in enumerate(points[:k], 1)
            ])
        return results

    def text_search(self, texts: list[str], k: int, filters=None) -> list[list[TextHit]] | None:
        """The lexical top-k of each query from the points' sparse vectors (index/qdrant/sparse.py), IDF
        over this generation's visible points; None where the collection has no sparse vectors (one from
        before them, or a generation whose text index does not record its token count): the caller then
        takes the text list from the generation's FTS5 artifact."""
        models = _models()
        if self._sparse is None:
            with self.store.talking("reading the collection's schema"):
                self._sparse = avgdl_of(self.manifest) is not None and has_sparse(self.store.client, self.physical)
        if not self._sparse:
            return None
        flt = visible_filter(self.manifest.generation, filters)
        requests, asked = [], []
        for text in texts:
            indices, values = query_vector(text)
            asked.append(bool(indices))
            if not indices:
                continue  # no token: no text hit (as the FTS5 engine)
            requests.append(models.QueryRequest(query=models.SparseVector(indices=indices, values=values), using=SPARSE,
                                                filter=flt, params=idf_scope(self.manifest.generation), limit=k + 16,
                                                with_payload=["path", "path_raw", "page"]))
        with self.store.talking("querying"):
            answers = self.store.client.query_batch_points(self.physical, requests) if requests else []
        results: list[list[TextHit]] = []
        pending = iter(answers)
        for has_tokens in asked:
            if not has_tokens:
                results.append([])
                continue
            answer = next(pending)
            named = [(self._paths.get(point_key(p.payload, self.legacy_paths)), p) for p in answer.points]
            hits = [TextHit(path, int(p.payload["page"]), float(p.score)) for path, p in named if path is not None and p.score > 0]
            hits.sort(key=lambda hit: (-hit.score, hit.path, hit.page))  # ties as the FTS5 engine orders them
            results.append(hits[:k])
        return results

    def page_vectors(self, doc: Document) -> list[np.ndarray]:
        """Every page's vectors of a document, in page order (exports)."""
        ids = [point_id(s.segment, r) for s in doc.spans for r in range(s.first, s.first + s.pages)]
        found: dict[str, np.ndarray] = {}
        with self.store.talking("reading vectors"):
            for start in range(0, len(ids), 64):
                for record in self.store.client.retrieve(self.physical, ids[start : start + 64], with_vectors=[VECTOR]):
                    found[str(record.id)] = np.asarray(record.vector[VECTOR], dtype=np.float16)
        if len(found) != len(ids):
            raise IndexProblem(f"{doc.path}: {len(ids) - len(found)} of its pages are missing from {self.store.location}.",
                               hint=REBUILD_HINT)
        return [found[i] for i in ids]


QdrantIndex = QdrantView  # the name before the split (index/qdrant_store.py and its importers)
