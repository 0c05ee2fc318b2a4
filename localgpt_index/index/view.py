"""Views of one committed generation, opened and checked.

`GenerationView` holds what every backend's
view shares (the store, the manifest, its documents, the artifacts and their blobs); `LocalView` adds
exact or two-pass MaxSim scoring of query vectors against the memory-mapped segments of a local index.
The Qdrant view (index/qdrant/view.py) shares `GenerationView` only: Qdrant ranks the pages itself (and
answers text_search from its sparse vectors).
No view loads a model (query.search composes one with it)."""

from __future__ import annotations

import contextvars
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import numpy as np

from ..core.errors import IndexProblem
from ..core.metadata import matches
from ..core.types import SearchHit
from .artifact_registry import open_artifact
from .artifacts import BlobSource
from .format.checksums import prefetch
from .scoring.codes import SegmentCodes, first_pass
from .scoring.codes.artifact import CODES
from .scoring.codes.plan import ScoringPath, choose
from .scoring.early_reads import EarlyReads, ReadCounts
from .format.manifest import REBUILD_HINT, Document, Manifest
from .scoring.chunks import Queries
from .scoring.maxsim import PARTS_IN_FLIGHT, expect_pass, maxsim, part_pool

if TYPE_CHECKING:
    from .scoring.device import DeviceScorer
    from .text.engine import TextHit

# per segment: the rows (page indices in the segment) to score, and the document and page of each
PageTable = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


class ExactUnit(NamedTuple):
    """A part of an exact scoring pass: pages (rows, in row order) of one segment."""

    segment_id: str
    rows: np.ndarray


class GenerationView:
    """What every view of one committed generation holds, whatever ranks its pages: the store, the
    manifest, the documents by path, and the generation's artifacts (opened on first use, checked).
    A backend's view adds page_vectors, search_vectors and scoring_path (index/protocols.View), and says what
    else it can do: exact_scoring and text_search (here: neither)."""

    def __init__(self, store: Any, manifest: Manifest) -> None:  # an LocalStore or a QdrantStore
        self.store = store
        self.manifest = manifest
        self._by_path: dict[str, Document] | None = None
        self._artifacts: dict[str, object | None] = {}

    @property
    def documents(self) -> list[Document]:
        return self.manifest.documents

    @property
    def page_count(self) -> int:
        return self.manifest.page_count

    def document(self, path: str) -> Document | None:
        if self._by_path is None:
            self._by_path = {d.path: d for d in self.manifest.documents}
        return self._by_path.get(path)

    def artifact(self, name: str) -> object | None:
        """Artifact `name` of this generation, opened on first use (its blobs checked); None when
        the generation has none or it is not registered here: the caller falls back. Never writes."""
        if name not in self._artifacts:
            self._artifacts[name] = open_artifact(name, self.manifest, self._blob_source())
        return self._artifacts[name]

    def blobs(self) -> BlobSource:
        """Where this generation's artifact blobs are read from, checked (a reader's: it never writes)."""
        return self._blob_source()

    def _blob_source(self) -> BlobSource:
        return self.store.blob_source()

    def exact_scoring(self) -> LocalView | None:
        """None: this view's store ranks the pages (LocalView scores them here: protocols.ExactScoring)."""
        return None

    def text_search(self, texts: list[str], k: int, filters: dict[str, str] | None = None) -> list[list[TextHit]] | None:
        """None: the text lists come from the generation's text artifact (a store with text lists of its own says)."""
        return None


class LocalView(GenerationView):
    """A local index's generation, scored here: exact MaxSim over its memory-mapped segments, or a
    first pass over their binary codes with exact rescoring (no model: query.search.Searcher adds it)."""

    def __init__(self, store: Any, manifest: Manifest) -> None:  # a LocalStore
        super().__init__(store, manifest)
        self._table: PageTable | None = None  # of all documents, built on first use
        self._device_scorer: DeviceScorer | None = None  # scores exactly instead of scoring.maxsim when set (use_scorer)
        self.read_counts = ReadCounts()  # candidates' bytes read by this view's first passes, early and late

    def exact_scoring(self) -> LocalView:
        """This view: its pages are scored here (ExactScoring)."""
        return self

    def use_scorer(self, scorer: DeviceScorer | None) -> None:
        """Score exact parts with `scorer` (the query layer's device scorer of this generation); None: the CPU scorer."""
        self._device_scorer = scorer

    def page_vectors(self, doc: Document) -> list[np.ndarray]:
        """Every page's vectors of a document, in page order (exports)."""
        rows: dict[str, list[int]] = {}  # each segment's rows, checked at once (a query's hits: one-page spans)
        for span in doc.spans:
            rows.setdefault(span.segment, []).extend(range(span.first, span.first + span.pages))
        files = {segment: self.store.segment_files(self.manifest.segments[segment]) for segment in rows}
        for segment, wanted in rows.items():
            files[segment].check_pages(np.unique(wanted))
        return [np.asarray(files[span.segment].vectors[files[span.segment].offsets[r]: files[span.segment].offsets[r + 1]])
                for span in doc.spans for r in range(span.first, span.first + span.pages)]

    def search_vectors(
        self,
        query_vectors: Sequence[np.ndarray],
        k: int,
        device: str = "cpu",
        filters: dict[str, str] | None = None,
        first_pass: int | str | None = None,
    ) -> list[list[SearchHit]]:
        """Rank the pages for already-encoded queries; ties go to the earlier path, then the earlier page.

        Filtered-out documents are not scored at all. With `first_pass` (a number of candidates, or "auto":
        see scoring_path), a first pass over the binary codes stored with each segment picks that many
        pages per query, and only those are scored exactly (lossy: a page the first pass misses is
        not returned). Without codes (an index written before them) every page is scored exactly."""
        docs = self.manifest.documents
        if filters:
            docs = [d for d in docs if matches(d.metadata, filters)]
            table = page_table(docs)
        else:
            table = self.all_pages()
        if not docs or not len(query_vectors):
            return [[] for _ in query_vectors]
        plan = self.scoring_path(first_pass)
        if plan.path == "first-pass" and plan.candidates:
            early = EarlyReads(self._scattered_reads, plan.candidates, sum(len(rows) for rows, _, _ in table.values()))
            tables = self._first_pass(query_vectors, table, plan.candidates, early)
            return [self._rank([q], docs, k, device, t, early)[0] for q, t in zip(query_vectors, tables)]
        return self._rank(query_vectors, docs, k, device, table)

    def scoring_path(self, first_pass: int | str | None) -> ScoringPath:
        """Which path answers a request with `first_pass` (None, N, "auto"): codes.plan.choose."""
        segments = self.manifest.segments
        if any(seg.storage != "file" for seg in segments.values()):
            return ScoringPath("store", first_pass if isinstance(first_pass, int) else None, "the store ranks the pages")
        codes = self.artifact(CODES.name) if first_pass is not None else None
        coded = {sid for sid in segments if codes is not None and sid in codes}  # type: ignore[operator]  # StoredCodes
        vector_bytes = sum(seg.rows * seg.dim * 2 for seg in segments.values())
        return choose(first_pass, self.page_count, vector_bytes, list(segments), coded)

    def _first_pass(self, query_vectors, table: PageTable, candidates: int, early: EarlyReads | None = None) -> list[PageTable]:
        """Per query, the page table narrowed to the `candidates` pages whose binary codes rank best
        (estimated MaxSim); the pages of segments without codes are all kept (scored exactly). With `early`,
        the likely candidates' pages are read while the pass runs (early_reads), and it is finished after."""
        codes: Any = self.artifact(CODES.name)
        coded, exact = [], {}
        for segment_id, (rows, _, _) in table.items():
            segment = self.manifest.segments[segment_id]
            if codes is None or segment_id not in codes:
                exact[segment_id] = table[segment_id]
                continue
            part = codes.segment(segment_id)
            if part.words.shape[0] != segment.rows:
                raise IndexProblem(f"segment {segment_id}: codes for {part.words.shape[0]} rows, the segment has {segment.rows}; "
                                   "the index is damaged.", hint=REBUILD_HINT)
            offsets = self.store.segment_files(segment).offsets  # no vector read
            coded.append(SegmentCodes(segment_id, part.words, offsets, rows, part.ids, part.codebook, part.check_rows))
        scored = (lambda seg, estimates: early.scored(seg.segment, seg.pages, estimates)) if early is not None else None
        picks = first_pass(query_vectors, coded, candidates, scored=scored)
        tables = [{**exact, **{sid: tuple(a[idx] for a in table[sid]) for sid, idx in chosen.items()}} for chosen in picks]
        if early is not None:
            wanted: dict[str, list[np.ndarray]] = {}
            for narrowed in tables:
                for sid, (seg_rows, _, _) in narrowed.items():
                    wanted.setdefault(sid, []).append(seg_rows)
            early.finish({sid: np.concatenate(parts) for sid, parts in wanted.items()}, self.read_counts)
        return tables

    def _scattered_reads(self, segment_id: str, rows: np.ndarray) -> list:
        return self.store.segment_files(self.manifest.segments[segment_id]).scattered_reads(rows)

    def _prefetch(self, table: PageTable, early: EarlyReads | None = None) -> None:
        """Scattered pages (a first pass's candidates): the blocks of all of them (but those read early)
        read at once, many reads in flight, before any is checked and scored (a long run of pages, an exact
        scan, is streamed instead)."""
        files = {sid: self.store.segment_files(self.manifest.segments[sid]) for sid in table}
        left = {sid: early.rows_left(sid, rows) if early is not None else rows for sid, (rows, _, _) in table.items()}
        late = prefetch([read for sid, rows in left.items() if len(rows) for read in files[sid].scattered_reads(rows)])
        if early is not None:
            self.read_counts.add(late=late)

    def _rank(self, query_vectors, docs: list[Document], k: int, device: str, table: PageTable,
              early: EarlyReads | None = None) -> list[list[SearchHit]]:
        """Exact scores for the pages of `table`."""
        self._prefetch(table, early)
        if self._cpu_scorer(device):  # its kernel loaded first where this pass pays for it
            expect_pass(self._rows(table), sum(len(q) for q in query_vectors))
        scores = self.score_units(query_vectors, self.exact_units(table), device)
        return self.rank_scores(np.concatenate(scores, axis=1), docs, k, table)

    def _rows(self, table: PageTable) -> int:
        """The page rows (vectors) of the pages of `table`."""
        total = 0
        for segment_id, (pages, _, _) in table.items():
            offsets = self.store.segment_files(self.manifest.segments[segment_id]).offsets
            total += int((offsets[pages + 1] - offsets[pages]).sum())
        return total

    def exact_units(self, table: PageTable | None = None) -> list[ExactUnit]:
        """The parts exact scoring of `table` (default: every page) goes through, in order: their scores,
        side by side, are the scores rank_scores takes. serve lets queries join a pass between parts."""
        table = table if table is not None else self.all_pages()
        units = []
        for segment_id, (rows, _, _) in table.items():
            if self._device_scorer is not None:  # a device scorer takes a segment at once
                units.append(ExactUnit(segment_id, rows))
            else:
                files = self.store.segment_files(self.manifest.segments[segment_id])
                units += [ExactUnit(segment_id, part) for part in files.groups(rows)]
        return units

    def _cpu_scorer(self, device: str) -> bool:
        """Whether exact passes on `device` are scored by the CPU scorer (score.maxsim's compiled kernel or
        torch's path), not a device scorer."""
        return self._device_scorer is None and device == "cpu"

    def parts_in_flight(self, device: str = "cpu") -> int:
        """Parts of a pass scored at once: PARTS_IN_FLIGHT on the CPU scorer, one on a device scorer."""
        return PARTS_IN_FLIGHT if self._cpu_scorer(device) else 1

    def start_unit(self, query_vectors: Queries, unit: ExactUnit, device: str = "cpu") -> Future:
        """score_unit on a thread of the part pool: its scores, when they come (at most parts_in_flight at once).
        Query vectors given as a function are asked for when the part's scoring begins (score.Queries)."""
        # in this thread's context: the scorer's choice for a warm service's one-shot answer (kernel_policy.as_one_shot)
        return part_pool().submit(contextvars.copy_context().run, self.score_unit, query_vectors, unit, device)

    def score_units(self, query_vectors: Sequence[np.ndarray], units: list[ExactUnit], device: str = "cpu") -> list[np.ndarray]:
        """score_unit of each unit, in order, parts_in_flight of them at once (8 stacked queries over 1,000
        pages on 2 cores: 1.07x with two, in 12 interleaved rounds)."""
        depth = self.parts_in_flight(device)
        if depth < 2 or len(units) < 2:
            return [self.score_unit(query_vectors, unit, device) for unit in units]
        flight: deque[Future] = deque()
        scores = []
        for unit in units:
            flight.append(self.start_unit(query_vectors, unit, device))
            if len(flight) == depth:
                scores.append(flight.popleft().result())
        return scores + [scoring.result() for scoring in flight]

    def score_unit(self, query_vectors: Queries, unit: ExactUnit, device: str = "cpu") -> np.ndarray:
        """Exact scores (queries, the unit's pages) of one part of exact_units; its blocks checked first."""
        files = self.store.segment_files(self.manifest.segments[unit.segment_id])
        if self._device_scorer is not None:
            queries = query_vectors() if callable(query_vectors) else query_vectors
            if not len(queries):
                return np.zeros((0, len(unit.rows)), dtype=np.float32)
            return self._device_scorer.score(queries, unit.segment_id, files, unit.rows)
        files.check_pages(unit.rows)
        return maxsim(query_vectors, files.vectors, files.offsets, unit.rows, device=device)

    def all_pages(self) -> PageTable:
        """The page table of every document (built once per view)."""
        self._table = self._table or page_table(self.manifest.documents)
        return self._table

    def rank_scores(self, scores: np.ndarray, docs: list[Document], k: int, table: PageTable) -> list[list[SearchHit]]:
        """The top k of each row of `scores` (queries, the pages of `table` in its order)."""
        doc_of = np.concatenate([doc_of for _, doc_of, _ in table.values()])
        page_of = np.concatenate([page_of for _, _, page_of in table.values()])
        results = []
        for row in scores:
            order = np.lexsort((page_of, doc_of, -row))[:k]
            results.append(
                [
                    SearchHit(rank, float(row[i]), docs[doc_of[i]].path, int(page_of[i]), docs[doc_of[i]].sha256,
                              docs[doc_of[i]].kind, dict(docs[doc_of[i]].metadata))
                    for rank, i in enumerate(order, 1)
                ]
            )
        return results




def page_table(docs: list[Document]) -> PageTable:
    """Where every page of `docs` is: per segment, its rows, and the document number and page of each."""
    by_segment: dict[str, list[tuple[int, int, int, int]]] = {}
    for number, doc in enumerate(docs):
        offset = 0
        for span in doc.spans:
            by_segment.setdefault(span.segment, []).append((span.first, span.pages, number, offset))
            offset += span.pages
    table: PageTable = {}
    for segment_id, parts in by_segment.items():
        firsts, counts, numbers, offsets = (np.array(column, dtype=np.int64) for column in zip(*parts))
        total = int(counts.sum())
        starts = np.repeat(np.cumsum(counts) - counts, counts)  # where each part begins in the flat arrays
        within = np.arange(total) - starts
        rows = np.repeat(firsts, counts) + within
        order = np.argsort(rows, kind="stable")  # in row order: the scorer reads contiguous runs in one copy
        table[segment_id] = (rows[order], np.repeat(numbers, counts)[order], (np.repeat(offsets, counts) + within + 1)[order])
    return table
