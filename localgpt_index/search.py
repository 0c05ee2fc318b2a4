"""Open an index and answer queries: encode, score with exact MaxSim, rank."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .device import choose_precision, default_batch_size, detect_capabilities
from .encode import ByaldiEncoder, PageEncoder
from .errors import IndexProblem
from .metadata import matches
from .models import resolve_model
from .score import maxsim
from .store import DocumentEntry, IndexStore, Manifest, MissingIndexFile, index_path


@dataclass(frozen=True)
class SearchHit:
    rank: int
    score: float
    path: str
    page: int  # 1-based
    sha256: str
    kind: str
    metadata: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class Index:
    """A read-only view of one committed generation of an index."""

    def __init__(self, store: IndexStore, manifest: Manifest) -> None:
        self.store = store
        self.manifest = manifest
        self._encoder: PageEncoder | None = None
        self._codes: dict = {}  # segment id -> sign codes, for the first pass

    @property
    def documents(self) -> list[DocumentEntry]:
        return self.manifest.documents

    @property
    def page_count(self) -> int:
        return self.manifest.page_count

    def load_encoder(self, model: str | None = None, device: str = "auto", dtype: str = "auto") -> PageEncoder:
        """Load the model the index was built with; another model is refused."""
        ref = resolve_model(model or self.manifest.model["id"])
        if ref.fingerprint != self.manifest.model["fingerprint"]:
            raise IndexProblem(
                f"{self.store.root} was built with {self.manifest.model['id']} "
                f"({self.manifest.model['fingerprint']}), not {ref.id} ({ref.fingerprint}); "
                "its vectors cannot be compared with another model's.",
                hint="Query without --model, or rebuild the index with the new model (build --rebuild --model ...).",
            )
        caps = detect_capabilities()
        precision = choose_precision(caps, device, dtype)
        self._encoder = ByaldiEncoder(ref, precision, default_batch_size(precision, caps))
        return self._encoder

    def search(
        self,
        queries: str | Sequence[str],
        k: int = 5,
        filters: dict[str, str] | None = None,
        candidates: int | None = None,
    ) -> list[list[SearchHit]]:
        """Top-k pages for each query (all queries are encoded in one batch), among the
        documents whose metadata matches every KEY=VALUE of `filters`; see search_vectors."""
        texts = [queries] if isinstance(queries, str) else list(queries)
        encoder = self._encoder or self.load_encoder()
        return self.search_vectors(
            encoder.encode_queries(texts), k, device=encoder.precision.device, filters=filters, candidates=candidates
        )

    def search_vectors(
        self,
        query_vectors: Sequence[np.ndarray],
        k: int,
        device: str = "cpu",
        filters: dict[str, str] | None = None,
        candidates: int | None = None,
    ) -> list[list[SearchHit]]:
        """Rank the pages for already-encoded queries; ties go to the earlier path, then the earlier page.

        Filtered-out documents are not scored at all. With `candidates`, a first pass over
        sign-quantised vectors (built on first use and kept, half the size of the index)
        picks that many pages per query, and only those are scored exactly (lossy: a page
        the first pass misses is not returned)."""
        docs = self.manifest.documents
        if filters:
            docs = [d for d in docs if matches(d.metadata, filters)]
        if candidates:
            return self._two_pass(query_vectors, docs, k, candidates, device)
        return self._rank(query_vectors, docs, k, device)

    def _two_pass(self, query_vectors, docs: list[DocumentEntry], k: int, candidates: int, device: str) -> list[list[SearchHit]]:
        from .score import approximate_maxsim, sign_codes

        parts, columns = [], []  # approximate scores, and the (document, page index) of each column
        for segment_id, numbers in self._by_segment(docs).items():
            segment = self.manifest.segments[segment_id]
            vectors, offsets = self.store.segment_arrays(segment)
            if segment_id not in self._codes:
                self._codes[segment_id] = sign_codes(vectors)
            approx = approximate_maxsim(query_vectors, self._codes[segment_id], offsets)
            rows = [(n, p) for n in numbers for p in range(docs[n].pages)]
            parts.append(approx[:, [docs[n].first_page + p for n, p in rows]])
            columns += rows
        approx = np.concatenate(parts, axis=1)
        results = []
        for query, row in zip(query_vectors, approx):
            chosen: dict[int, list[int]] = {}
            for i in np.argsort(-row, kind="stable")[:candidates]:
                n, p = columns[i]
                chosen.setdefault(n, []).append(p)
            selection = {n: np.array(sorted(p)) for n, p in chosen.items()}
            results.append(self._rank([query], docs, k, device, selection)[0])
        return results

    @staticmethod
    def _by_segment(docs: list[DocumentEntry], only: set[int] | None = None) -> dict[str, list[int]]:
        by_segment: dict[str, list[int]] = {}
        for number, doc in enumerate(docs):
            if only is None or number in only:
                by_segment.setdefault(doc.segment, []).append(number)
        return by_segment

    def _rank(
        self, query_vectors, docs: list[DocumentEntry], k: int, device: str, selection: dict[int, np.ndarray] | None = None
    ) -> list[list[SearchHit]]:
        """Exact scores for every page of `docs`, or the page indices `selection` gives per document."""
        if not docs or not query_vectors:
            return [[] for _ in query_vectors]
        pages_of = selection or {n: np.arange(doc.pages) for n, doc in enumerate(docs)}
        score_parts, doc_parts, page_parts = [], [], []
        for segment_id, numbers in self._by_segment(docs, set(pages_of)).items():
            vectors, offsets = self.store.segment_arrays(self.manifest.segments[segment_id])
            rows = np.concatenate([docs[n].first_page + pages_of[n] for n in numbers])
            score_parts.append(maxsim(query_vectors, vectors, offsets, rows, device=device))
            doc_parts.append(np.repeat(numbers, [len(pages_of[n]) for n in numbers]))
            page_parts.append(np.concatenate([pages_of[n] + 1 for n in numbers]))
        scores = np.concatenate(score_parts, axis=1)
        doc_of = np.concatenate(doc_parts)
        page_of = np.concatenate(page_parts)
        results = []
        for row in scores:
            order = np.lexsort((page_of, doc_of, -row))[:k]
            results.append(
                [
                    SearchHit(rank, float(row[i]), docs[doc_of[i]].path, int(page_of[i]), docs[doc_of[i]].sha256,
                              docs[doc_of[i]].kind, docs[doc_of[i]].metadata)
                    for rank, i in enumerate(order, 1)
                ]
            )
        return results


def open_index(index_dir: str | Path | None = None, name: str | None = None) -> Index:
    """Open the current generation of an index (default ./.lgpt-index/default).

    Every segment is checked (sizes, offsets, checksums) here, so a damaged
    index fails now with a clear message instead of answering wrongly later.
    """
    root = index_path(index_dir, name)
    for attempt in range(3):
        store = IndexStore(root)
        manifest = store.read_manifest()
        if manifest is None:
            raise IndexProblem(
                f"no index at {store.root}.", hint="Build one first: lgpt-index build DOCS (or pass --index-dir / --name)."
            )
        try:
            for segment in manifest.segments.values():
                store.segment_arrays(segment)
        except MissingIndexFile:
            if attempt == 2:
                raise
            continue  # a writer committed and collected meanwhile: follow the new HEAD
        return Index(store, manifest)
    raise AssertionError("unreachable")
