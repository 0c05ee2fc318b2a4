"""A read-only view of one committed generation in Qdrant."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.errors import IndexProblem
from ...core.metadata import matches
from ..format.manifest import (
    REBUILD_HINT,
    Document,
    Manifest,
)
from ..artifacts import BlobSource
from ..scoring.codes.plan import AUTO, AUTO_FROM_PAGES, DEFAULT_CANDIDATES, ScoringPath
from ..view import GenerationView
from ..text.artifact import LEXICAL, current
from ..text.engine import TextHit
from ..text.query import parse
from .blobs import QdrantBlobs
from .catalog import check_count
from .quantization import is_quantized, search_params
from .sparse import SPARSE, avgdl_of, has_sparse, idf_scope, languages_of, query_vector
from .ids import (
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
        self._quantized: bool | None = None
        self._paths = {doc_key(d.path, legacy_paths): d.path for d in manifest.documents}

    def _blob_source(self) -> BlobSource:
        return QdrantBlobs(self.store, self.store.catalog_of(self.physical))

    def scoring_path(self, first_pass: int | str | None) -> ScoringPath:
        """Which path answers a request with `first_pass` (None, N, "auto"), as query --json reports it:
        exact MaxSim over the original vectors, or Qdrant's binary first pass with rescoring where the
        collection has binary quantization and a server searches it (the in-process mode scores exactly)."""
        wanted, why = first_pass_wanted(first_pass, self.page_count)
        if wanted is None:
            return ScoringPath("exact", reason=f"{why}: Qdrant's MaxSim over the original vectors")
        if self.store.spec.path is not None:
            return ScoringPath("exact", reason=f"{why}, but Qdrant's in-process mode ignores binary quantization and scores exactly",
                               hint="a Qdrant server answers with the binary first pass (docs/qdrant.md)")
        if not self.quantized():
            return ScoringPath("exact", reason=f"{why}, but the collection {self.physical} has no binary quantization",
                               hint=ADD_QUANTIZATION)
        return ScoringPath("first-pass", wanted,
                           f"{why}: Qdrant's binary quantization, the top {wanted} rescored with the original vectors")

    def quantized(self) -> bool:
        """Whether the collection's page vectors have binary quantization (read once per view)."""
        if self._quantized is None:
            with self.store.talking("reading the collection's schema"):
                self._quantized = is_quantized(self.store.client, self.physical)
        return self._quantized

    def search_vectors(self, query_vectors, k: int, device: str = "cpu", filters=None, first_pass=None):
        """Top-k pages per query; ties go to the earlier path, then the earlier page, as locally.
        With `first_pass` (N, or "auto" past the threshold: codes.plan), Qdrant scores the pages by
        their binary codes first and rescores about N of them with the original vectors (lossy);
        without, the codes are ignored: exact MaxSim (quantization.py)."""
        from ...core.types import SearchHit

        models = _models()
        if not len(query_vectors):
            return []
        flt = visible_filter(self.manifest.generation, filters)
        limit = k + 16
        params = search_params(first_pass_wanted(first_pass, self.page_count)[0], limit)
        requests = [models.QueryRequest(query=np.asarray(query, dtype=np.float32).tolist(), using=VECTOR, filter=flt, params=params,
                                        limit=limit, with_payload=["path", "path_raw", "page", "sha256", "kind", "metadata"])
                    for query in query_vectors]
        with self.store.talking("querying"):
            answers = self.store.client.query_batch_points(self.physical, requests)
        self._check_short(answers, limit, filters)
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

    def _check_short(self, answers, limit: int, filters) -> None:
        """An answer with fewer points than the catalog has pages to give (points another client deleted while
        this view is open: serve holds one for hours) is recounted, one count as at open: damage is an
        IndexProblem, not an empty answer. A full answer costs nothing."""
        fewest = min((len(answer.points) for answer in answers), default=limit)
        if fewest < limit and fewest < sum(d.pages for d in self.manifest.documents if not filters or matches(d.metadata, filters)):
            check_count(self.store, self.physical, self.manifest)

    def text_search(self, texts: list[str], k: int, filters: dict[str, str] | None = None) -> list[list[TextHit]] | None:
        """The lexical top-k of each query from the points' sparse vectors (index/qdrant/sparse.py), IDF
        over this generation's visible points; None where the collection has no sparse vectors (one from
        before them, a generation whose text index does not record its token count or is of another analysis,
        a query with a phrase or a prefix): the caller then
        takes the text list from the generation's FTS5 artifact."""
        models = _models()
        if self._sparse is None:
            with self.store.talking("reading the collection's schema"):
                self._sparse = (current(self.manifest.artifacts.get(LEXICAL)) and avgdl_of(self.manifest) is not None
                                and has_sparse(self.store.client, self.physical))
        if not self._sparse:
            return None
        queries = [parse(text, languages_of(self.manifest)) for text in texts]
        if not all(query.plain for query in queries):
            return None  # a phrase or a prefix: the FTS5 engine answers (a sparse vector has no positions nor vocabulary)
        flt = visible_filter(self.manifest.generation, filters)
        requests, asked = [], []
        for query in queries:
            indices, values = query_vector(query)
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
        if len(found) != len(set(ids)):  # (a page asked twice is read once)
            raise IndexProblem(f"{doc.path}: {len(set(ids)) - len(found)} of its pages are missing from {self.store.location}.",
                               hint=REBUILD_HINT)
        return [found[i] for i in ids]


ADD_QUANTIZATION = ("any build adds it (`lgpt-index build DOCS --store URL`, even with nothing changed); "
                    "Qdrant then writes the codes in the background")


def first_pass_wanted(first_pass: int | str | None, pages: int) -> tuple[int | None, str]:
    """(how many pages Qdrant's binary first pass keeps, or None: exact; why). "auto" turns it on
    from the local index's page threshold (codes.plan.AUTO_FROM_PAGES): a Qdrant server's memory is
    its own, so the memory rule of a local index does not apply."""
    if first_pass is None:
        return None, "the default"
    if first_pass == AUTO:
        if pages < AUTO_FROM_PAGES:
            return None, f"auto: {pages} pages < {AUTO_FROM_PAGES}, exact serves"
        return DEFAULT_CANDIDATES, f"{pages} pages >= {AUTO_FROM_PAGES} (auto threshold)"
    return int(first_pass), "asked for"


