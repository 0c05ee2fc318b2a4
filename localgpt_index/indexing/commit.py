"""The commit policy: what each commit of a build records, and when it is due.

The build's engines (local or Ray) yield the same events (ingest/events.py); `CommitPolicy`
takes them, streams each page's vectors into the segment being written, and decides which
documents each commit holds: the complete ones, with those still in flight as "in progress"
(a long document commits inside itself), and what failed. No model here: it is tested with
synthetic events and a real store transaction.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import DocumentError
from ..core.failpoints import failpoint
from ..core.terminal import ProgressSink, stage
from ..index.format.manifest import Document, Failure, ModelInfo, Settings, Span
from ..core.types import PageRef
from ..index.transaction import SegmentWriter, Transaction
from ..ingest.convert import MissingConverter
from ..ingest.pagetext import PendingText
from ..ingest.text import PageText
from ..ingest.events import DocumentDone, DocumentFailed, DocumentOpened, EngineEvent, OpenedDocument, PagesEncoded
from .options import BuildOptions, BuildReport, Log, StageTimer
from .plan import BuildPlan, Embed, trusted_stat
from .textfollow import Followup, read_so_far, retext

DEFAULT_COMMIT_PAGES = 1000
COMMIT_SHARE = 20  # by default, commits take at most about 1/20 of a build's time (a huge catalog commits less often)

Clock = Callable[[], float]


@dataclass
class DocProgress:
    """One planned document on its way through the pipeline."""

    embed: Embed
    first_page: int = 1  # the first page this build renders (later than 1 for a resumed document)
    done_spans: list[Span] = field(default_factory=list)  # committed before (a resumed or long document)
    total: int | None = None  # pages of the whole document, once opened
    seg_first: int | None = None  # its first page in the segment being written
    seg_pages: int = 0
    sent: int | None = None  # pages the engine sent, once it has sent them all
    received: int = 0  # of those, pages whose vectors were written
    converter: str | None = None
    pdf: tuple[str, str | None] | None = None  # (name in the index, sha256) of its stored PDF

    @property
    def path(self) -> str:
        return self.embed.file.path

    @property
    def complete(self) -> bool:
        return self.sent is not None and self.received >= self.sent

    def document(self, segment_id: str | None, scan_started_ns: int, file=None, metadata=None) -> Document:
        spans = list(self.done_spans)
        if self.seg_pages:
            assert segment_id is not None and self.seg_first is not None, "a document with pages in a segment knows where"
            spans.append(Span(segment=segment_id, first=self.seg_first, pages=self.seg_pages))
        file = file or self.embed.file
        return Document(
            path=file.path, sha256=self.embed.sha256, size=file.size, stat=trusted_stat(file.stat, scan_started_ns),
            kind=file.kind, pages=sum(s.pages for s in spans), spans=spans, converter=self.converter,
            pdf=self.pdf[0] if self.pdf else None, pdf_sha256=self.pdf[1] if self.pdf else None,
            metadata=self.embed.metadata if metadata is None else metadata,
        )

    @property
    def pages(self) -> int:
        return sum(s.pages for s in self.done_spans) + self.seg_pages


class CommitCadence:
    """When a commit is due: every `every_pages` pages (default 1000, spaced out while commits are
    slow: a huge catalog) or `every_s` seconds. A one-commit build (--rebuild, --strict) seals its
    segment instead, so that segments stay of bounded size."""

    def __init__(self, every_pages: int | None, every_s: float, once: bool, clock: Clock = time.monotonic) -> None:
        self.every_pages, self.every_s, self.once, self.clock = every_pages, every_s, once, clock
        self.last = clock()
        self.commit_seconds = 0.0

    def due(self, pending_pages: int) -> str | None:
        """"seal", "commit", or None."""
        now = self.clock()
        every = self.every_pages or DEFAULT_COMMIT_PAGES
        if not (pending_pages >= every or now - self.last >= self.every_s):
            return None
        if self.once:
            self.last = now
            return "seal"
        if self.every_pages or now - self.last >= COMMIT_SHARE * self.commit_seconds:
            return "commit"
        return None

    def committed(self, seconds: float) -> None:
        self.last = self.clock()
        self.commit_seconds = seconds


class Catalog:
    """What the next commit records: the documents, those in progress, the failures."""

    def __init__(self, plan: BuildPlan, rebuild: bool, once: bool) -> None:
        self.documents: dict[str, Document] = {d.path: d for d in plan.documents}
        if not rebuild:  # a changed file's old entry answers until its new one is committed
            for embed in plan.embed:
                for path, old in [(embed.file.path, embed.replaces), *[(f.path, o) for f, _, o in embed.twins]]:
                    if old is not None:
                        self.documents[path] = old
        self.in_progress: dict[str, Document] = {e.file.path: e.resume for e in plan.embed if e.resume and not once}
        self.failures: list[Failure] = []

    def failed(self, embed: Embed, exc: DocumentError) -> list[Failure]:
        """The failures of a document and of its twins (the same bytes under other paths: each fails as it did)."""
        failures = []
        for path in [embed.file.path, *[twin.path for twin, _, _ in embed.twins]]:
            failures.append(Failure(path=path, stage=exc.stage, reason=exc.reason[:2000], environment=isinstance(exc, MissingConverter)))
            self.in_progress.pop(path, None)
            if path in self.documents and self.documents[path].sha256 != embed.sha256:
                del self.documents[path]  # the old content of a file whose new content failed
        self.failures += failures
        return failures

    def complete(self, state: DocProgress, segment_id: str | None, scan_started_ns: int) -> None:
        doc = state.document(segment_id, scan_started_ns)
        self.documents[doc.path] = doc
        self.in_progress.pop(doc.path, None)
        for twin, metadata, _ in state.embed.twins:
            self.documents[twin.path] = state.document(segment_id, scan_started_ns, twin, metadata)

    def carry(self, state: DocProgress, segment_id: str | None, scan_started_ns: int, record: bool) -> None:
        """A document in flight keeps its pages so far as spans of the sealed segment (and is
        recorded in progress, `record`, so that a resumed build carries on from there)."""
        doc = state.document(segment_id, scan_started_ns)
        state.done_spans, state.seg_first, state.seg_pages = list(doc.spans), None, 0
        if record:
            self.in_progress[doc.path] = doc


class CommitPolicy:
    """Takes the engines' events into the transaction, and commits as the cadence says."""

    def __init__(self, txn: Transaction, plan: BuildPlan, options: BuildOptions, report: BuildReport, timer: StageTimer,
                 progress: ProgressSink | None, log: Log, scan_started_ns: int, clock: Clock = time.monotonic) -> None:
        self.txn, self.plan, self.report, self.timer, self.progress, self.log = txn, plan, report, timer, progress, log
        self.scan_started_ns = scan_started_ns
        self.once = options.rebuild or options.strict  # one commit, at the end
        self.strict = options.strict
        self.cadence = CommitCadence(options.commit_every_pages, options.commit_every_s, self.once, clock)
        self.catalog = Catalog(plan, options.rebuild, self.once)
        self.model_info: ModelInfo | None = None
        self.settings = Settings()
        self.writer: SegmentWriter | None = None
        self.states: dict[int, DocProgress] = {}
        self.pending: list[DocProgress] = []  # complete, waiting for the next commit
        self.gone: set[int] = set()
        self.pending_pages = 0
        self.discard: Callable[[int], None] = lambda number: None  # the engine drops a failed document's pages
        self.without_parts: tuple[str, ...] = ()  # artifacts whose parts the segments do not get (--text never: "text")
        self.pending_text: list[tuple[int, PendingText]] = []  # rows of the segment being written whose OCR is not read
        self.followups: list[Followup] = []  # (segment, row, its pending text) of sealed segments
        self.read_yet: Callable[[PendingText], PageText | None] = lambda text: None  # a pending row's text, if read by now

    # events

    def handle(self, event: EngineEvent) -> None:
        """One event of an engine, then a commit if one is due."""
        match event:
            case PagesEncoded() if event.numbers <= self.gone:
                return
            case DocumentOpened() | DocumentDone() | DocumentFailed() if event.number in self.gone:
                return
            case PagesEncoded():
                self._take(event)
            case DocumentOpened(number, document):
                self._open(number, document)
            case DocumentDone(number, pages):
                self.states[number].sent = pages
                self._finish_ready([number])
            case DocumentFailed(number, error):
                self.fail(number, self._why_failed(number, error))
            case _:
                raise TypeError(f"not an engine event: {event!r}")
        self.commit_if_due()

    def _open(self, number: int, document: OpenedDocument) -> None:
        embed = self.plan.embed[number]
        resume = embed.resume
        state = DocProgress(embed, total=document.pages)
        if resume is not None:
            state.first_page = resume.pages + 1
            state.done_spans = list(resume.spans)
            state.converter = resume.converter
            state.pdf = (resume.pdf, resume.pdf_sha256) if resume.pdf else None
        elif document.converter:
            state.converter = document.converter
            state.pdf = self.txn.store_pdf(document.pdf) if document.pdf is not None else None
        for note in document.notes:
            self.report.notes.append({"path": embed.file.path, "note": note})
            self.log(f"note: {embed.file.path}: {note}")
        self.states[number] = state

    def _take(self, event: PagesEncoded) -> None:
        """Stream a batch's vectors into the segment being written."""
        ended: list[int] = []
        for position, (number, result) in enumerate(event.pages):
            state = self.states.get(number)
            if state is None or number in self.gone:
                continue
            if isinstance(result, DocumentError):
                self.fail(number, result)
                continue
            self._append(state, result, event.texts[position] if position < len(event.texts) else None)
            ended.append(number)
        failpoint("encode")
        if self.progress:
            self.progress.advance("pages", len(event.pages))
        self._finish_ready(ended)

    def _append(self, state: DocProgress, vectors: np.ndarray, text: PageText | None) -> None:
        """One page's vectors, and its text where it was read, into the segment being written."""
        if self.writer is None:
            assert self.settings.dim is not None, "the first page sets the dimension"
            self.writer = self.txn.segment_writer(self.settings.dim, without=self.without_parts)
        file = state.embed.file
        ref = PageRef(file.path, state.pages + 1, state.embed.sha256, file.kind, state.embed.metadata)
        with self.txn.writing():
            index = self.writer.append(vectors, ref, extra=text.extra() if text is not None else None)
        if isinstance(text, PendingText) and text.claim is not None:
            self.pending_text.append((index, text))
        if state.seg_first is None:
            state.seg_first = index
        state.seg_pages += 1
        state.received += 1
        self.pending_pages += 1
        self.report.pages_embedded += 1

    def _finish_ready(self, numbers: list[int]) -> None:
        for number in dict.fromkeys(numbers):
            state = self.states.get(number)
            if state is None or not state.complete or number in self.gone:
                continue
            embed = state.embed
            changed = changed_since_discovery(embed.file) or next(
                (why for twin, _, _ in embed.twins if (why := changed_since_discovery(twin))), None)
            if changed:
                self.fail(number, DocumentError("discover", changed))
                continue
            del self.states[number]
            self.pending.append(state)
            self.report.indexed += 1
            self.report.reused += len(embed.twins)
            if self.progress:
                self.progress.advance("documents")

    def _why_failed(self, number: int, error: DocumentError) -> DocumentError:
        """A document that could not be converted or rendered because it was deleted or edited
        meanwhile says so, not what poppler or LibreOffice made of the missing or half-written file."""
        changed = changed_since_discovery(self.plan.embed[number].file)
        return DocumentError("discover", changed) if changed else error

    def fail(self, number: int, exc: DocumentError) -> None:
        self.states.pop(number, None)
        self.gone.add(number)
        self.discard(number)
        failures = self.catalog.failed(self.plan.embed[number], exc)
        self.report.failed += len(failures)
        self.report.failures += failures
        if self.progress:
            self.progress.advance("documents")

    # commits

    def commit_if_due(self) -> None:
        if not (self.pending or self.pending_pages):
            return
        due = self.cadence.due(self.pending_pages)
        if due == "seal":
            self._seal()  # segments of bounded size, staged for the one commit at the end
        elif due == "commit":
            self.commit()

    def _seal(self) -> None:
        """Seal the segment being written; the documents complete so far take their places in the
        catalog, and those still in flight keep the pages they have as spans of it."""
        segment = self.txn.finish_segment(self.writer) if self.writer is not None else None
        self.writer = None
        segment_id = segment.id if segment else None
        if segment_id is not None:
            self.followups += [(segment_id, row, text) for row, text in self.pending_text]
        self.pending_text = []
        for state in self.pending:
            self.catalog.complete(state, segment_id, self.scan_started_ns)
        self.pending = []
        for state in self.states.values():
            if state.seg_pages or state.done_spans:
                self.catalog.carry(state, segment_id, self.scan_started_ns, record=not self.once)
        self.pending_pages = 0

    def commit(self) -> None:
        """Seal, then commit a generation with everything complete so far."""
        started = time.perf_counter()
        stage(self.progress, "committing")
        self._seal()
        retext(self.txn, read_so_far(self.followups, self.read_yet))  # text read since its rows were committed pending
        catalog = self.catalog
        assert self.model_info is not None, "a commit follows the model's load"
        manifest = self.txn.commit(list(catalog.documents.values()), self.model_info, self.settings,
                                   catalog.failures, list(catalog.in_progress.values()))
        self.report.generation = manifest.generation
        self.report.committed = True
        self.report.pages_total = manifest.page_count
        self.cadence.committed(time.perf_counter() - started)
        self.timer.add("commit", started)
        stage(self.progress, "committing", ended=True)

    def stop(self, message: str) -> None:
        """The device is gone: commit what is complete (a plain build), and report it (exit 4)."""
        self.report.stopped = message
        self.log(f"error: {message}")
        if not self.once:
            self.commit()

    def finish(self) -> None:
        """The last commit (none after a stop, nor for a --strict build with failures)."""
        if self.report.stopped:
            return
        if self.strict and self.catalog.failures:
            self.log(f"--strict: {len(self.catalog.failures)} document(s) failed, nothing committed.")
            return
        self.commit()


def changed_since_discovery(file) -> str | None:
    """Why the file's vectors cannot be trusted to match its recorded sha256, if they cannot."""
    try:
        stat = os.stat(file.path)
    except OSError:
        return "the file disappeared during the build"
    # ctime too: a rewrite in place that restores size and mtime (cp -p, rsync --inplace -t) still moves it
    now = (stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns)
    if now != (file.stat.size, file.stat.mtime_ns, file.stat.ino, file.stat.ctime_ns):
        return "the file changed during the build; the next build indexes its new content"
    return None
